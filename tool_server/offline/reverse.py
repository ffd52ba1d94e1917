"""Reverse image search over the world's images: features that survive crops and rescaling.

Pipeline for one query image:

1. **Perceptual hash** (64-bit DCT pHash, numpy/OpenCV): world images within a small Hamming distance are
   rescaled/recompressed copies of the query and are accepted at once (score from the distance).
2. **Colour containment shortlist**: a crop's colours are a subset of its source's colours, so the share of the
   query's coarse RGB histogram contained in a world image's histogram survives both crops and rescaling (a whole-
   image hash does not survive crops). The best ``shortlist`` images go on to step 3.
3. **ORB matching** (OpenCV) of the query against each shortlisted image: Lowe ratio test, then a RANSAC similarity
   transform (crop + scale + small rotation). The inlier count gives a geometric score; the mean colour difference
   between the query and the candidate warped into the query's frame gives a photometric score (it separates
   images that share a layout but not colours, e.g. two locator maps on the same base map). ``score = geo * colour``.

Features are computed once per world (background thread at startup) and cached on disk keyed by the world's content
hash, so later starts load them in about a second.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

from tool_server.child_process import start_as_server_child
from tool_server.offline.pixels import flattened

log = logging.getLogger(__name__)

FEATURE_VERSION = "orb2"  # orb2: transparent areas read on white (orb1 dropped the alpha channel)
SIDE = 512  # images are normalized to this long side before ORB (crops are upscaled, so pyramids overlap)
N_FEATURES = 250
HIST_BINS = 6  # per channel -> 216-bin colour histogram
PHASH_NEAR = 8  # Hamming distance (of 64) accepted as the same image
MIN_INLIERS = 8
FULL_GEO_INLIERS = 30  # inliers at which the geometric score saturates


@dataclass(frozen=True, slots=True)
class Match:
    image_id: str
    score: float  # 0..1
    method: str  # "phash" | "orb"
    inliers: int


def normalized(image: Image.Image) -> np.ndarray:
    """RGB at ``SIDE``, transparent areas on white as FetchImage and question images serve them
    (:func:`~tool_server.offline.pixels.flattened`): a world file and its served copy give the same features."""
    rgb = np.asarray(flattened(image))
    h, w = rgb.shape[:2]
    scale = SIDE / max(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return cv2.resize(rgb, size, interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)


def phash(rgb: np.ndarray) -> np.uint64:
    gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY).astype(np.float32)
    small = cv2.resize(gray, (32, 32), interpolation=cv2.INTER_AREA)
    low = cv2.dct(small)[:8, :8].flatten()
    bits = low > np.median(low[1:])
    return np.uint64(int("".join("1" if b else "0" for b in bits), 2))


def colour_hist(rgb: np.ndarray) -> np.ndarray:
    q = (rgb.reshape(-1, 3).astype(np.int32) * HIST_BINS) // 256
    idx = (q[:, 0] * HIST_BINS + q[:, 1]) * HIST_BINS + q[:, 2]
    hist = np.bincount(idx, minlength=HIST_BINS**3).astype(np.float32)
    return hist / max(1.0, hist.sum())


_OPENCV = threading.local()  # OpenCV detector/matcher objects are not shared across threads: one set per thread


def _orb():
    orb = getattr(_OPENCV, "orb", None)
    if orb is None:
        orb = _OPENCV.orb = cv2.ORB_create(nfeatures=N_FEATURES, fastThreshold=10, edgeThreshold=15, patchSize=15)
    return orb


def _matcher():
    matcher = getattr(_OPENCV, "matcher", None)
    if matcher is None:
        matcher = _OPENCV.matcher = cv2.BFMatcher(cv2.NORM_HAMMING)
    return matcher


def orb_features(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keypoint coordinates (n, 2) float32 and descriptors (n, 32) uint8 (n may be 0 on flat images)."""
    gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    kps, desc = _orb().detectAndCompute(gray, None)
    if desc is None:
        return np.zeros((0, 2), np.float32), np.zeros((0, 32), np.uint8)
    return np.array([k.pt for k in kps], np.float32), desc


@dataclass(slots=True)
class FeatureTable:
    ids: list[str]
    hashes: np.ndarray  # (n,) uint64
    hists: np.ndarray  # (n, bins) float32
    offsets: np.ndarray  # (n+1,) int64 into points/descriptors
    points: np.ndarray  # (m, 2) float32
    descriptors: np.ndarray  # (m, 32) uint8

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # processes (and threads) sharing a cache dir may write it at once
        tmp = path.with_suffix(f".tmp-{os.getpid()}-{threading.get_ident()}.npz")
        np.savez(
            tmp,
            ids=np.array(self.ids),
            hashes=self.hashes,
            hists=self.hists,
            offsets=self.offsets,
            points=self.points,
            descriptors=self.descriptors,
        )
        tmp.replace(path)

    _ARRAYS = ("hashes", "hists", "offsets", "points", "descriptors")

    def save_arrays(self, directory: Path) -> None:
        """The arrays as ``.npy`` files (ids aside), for :meth:`mapped`."""
        for name in self._ARRAYS:
            np.save(directory / f"{name}.npy", getattr(self, name))

    @classmethod
    def mapped(cls, directory: Path, ids: list[str]) -> FeatureTable:
        """The table whose arrays :meth:`save_arrays` wrote, memory-mapped read-only."""
        return cls(ids, *(np.load(directory / f"{name}.npy", mmap_mode="r") for name in cls._ARRAYS))

    @classmethod
    def load(cls, path: Path) -> FeatureTable:
        with np.load(path) as z:
            return cls([str(i) for i in z["ids"]], z["hashes"], z["hists"], z["offsets"], z["points"], z["descriptors"])

    @classmethod
    def compute(cls, images: dict[str, Path], abandoned: threading.Event | None = None) -> FeatureTable:
        """Raises :class:`FeaturesAbandoned` once ``abandoned`` is set (checked before each image)."""
        ids, hashes, hists, offsets, points, descs = [], [], [], [0], [], []
        for image_id, path in images.items():
            if abandoned is not None and abandoned.is_set():
                raise FeaturesAbandoned(f"abandoned after {len(ids)} of {len(images)} images")
            with Image.open(path) as im:
                rgb = normalized(im)
            pts, desc = orb_features(rgb)
            ids.append(image_id)
            hashes.append(phash(rgb))
            hists.append(colour_hist(rgb))
            points.append(pts)
            descs.append(desc)
            offsets.append(offsets[-1] + len(desc))
        return cls(
            ids,
            np.array(hashes, np.uint64),
            np.array(hists, np.float32).reshape(len(ids), HIST_BINS**3),
            np.array(offsets, np.int64),
            np.concatenate(points) if points else np.zeros((0, 2), np.float32),
            np.concatenate(descs) if descs else np.zeros((0, 32), np.uint8),
        )


class FeaturesAbandoned(Exception):
    """The features were no longer wanted: their server is closing (it would otherwise wait for the computation,
    ~10 s of CPU on the small world, before its process could exit)."""


def load_or_compute(images: dict[str, Path], cache_file: Path | None,
                    abandoned: threading.Event | None = None) -> FeatureTable:
    if cache_file is not None and cache_file.is_file():
        try:
            table = FeatureTable.load(cache_file)
            if table.ids == list(images):
                return table
            log.warning("feature cache %s does not match the world's images; recomputing", cache_file)
        except (OSError, ValueError, KeyError) as e:
            log.warning("feature cache %s is unreadable (%s); recomputing", cache_file, e)
    table = FeatureTable.compute(images, abandoned)
    if cache_file is not None:
        try:  # the default cache is the user's source cache, which a container may mount read-only
            table.save(cache_file)
        except OSError as e:
            log.warning("feature cache %s is not writable (%s); the features are kept in memory only", cache_file, e)
    return table


def _popcount64(x: np.ndarray) -> np.ndarray:
    return np.unpackbits(x.view(np.uint8).reshape(-1, 8), axis=1).sum(axis=1)


class ReverseIndex:
    def __init__(self, table: FeatureTable, images: dict[str, Path], *, shortlist: int = 150, verify: int = 8) -> None:
        self.table = table
        self.images = images
        self._shortlist = shortlist
        self._verify = verify

    def _colour_score(self, query: np.ndarray, image_id: str, transform: np.ndarray) -> float:
        with Image.open(self.images[image_id]) as im:
            cand = normalized(im)
        h, w = query.shape[:2]
        # transform maps query -> candidate; warp the candidate back into the query frame
        warped = cv2.warpAffine(
            cand,
            transform,
            (w, h),
            flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
            borderMode=cv2.BORDER_CONSTANT,
            borderValue=(0, 0, 0),
        )
        valid = (
            cv2.warpAffine(
                np.full(cand.shape[:2], 255, np.uint8),
                transform,
                (w, h),
                flags=cv2.INTER_NEAREST | cv2.WARP_INVERSE_MAP,
            )
            > 0
        )
        if valid.mean() < 0.5:
            return 0.0
        diff = np.abs(warped.astype(np.int16) - query.astype(np.int16)).mean(axis=2)[valid].mean()
        return float(max(0.0, 1.0 - diff / 64.0))

    def _geometry(self, q_pts: np.ndarray, q_desc: np.ndarray, k: int) -> tuple[int, np.ndarray] | None:
        """RANSAC inlier count and query->candidate transform, or None without enough consistent matches."""
        t = self.table
        lo, hi = t.offsets[k], t.offsets[k + 1]
        if hi - lo < 2:
            return None
        pairs = _matcher().knnMatch(q_desc, t.descriptors[lo:hi], k=2)
        good = [p[0] for p in pairs if len(p) == 2 and p[0].distance < 0.8 * p[1].distance]
        if len(good) < MIN_INLIERS:
            return None
        src = q_pts[[m.queryIdx for m in good]]
        dst = t.points[lo:hi][[m.trainIdx for m in good]]
        transform, inliers = cv2.estimateAffinePartial2D(src, dst, method=cv2.RANSAC, ransacReprojThreshold=6.0)
        if transform is None or int(inliers.sum()) < MIN_INLIERS:
            return None
        return int(inliers.sum()), transform

    def search(self, image: Image.Image, *, limit: int = 5) -> list[Match]:
        """Best ``limit`` matches, highest score first (only images with some geometric or hash evidence).

        Thread-safe without a lock (the index is read-only, OpenCV objects are per thread), so searches run in
        parallel on a pool's threads."""
        return self.search_normalized(normalized(image), limit=limit)

    def search_normalized(self, query: np.ndarray, *, limit: int = 5) -> list[Match]:
        """:meth:`search` of a query already normalized (:func:`normalized`: RGB, long side 512)."""
        t = self.table
        dist = _popcount64(np.bitwise_xor(t.hashes, phash(query)))
        found: dict[str, Match] = {}
        for k in np.flatnonzero(dist <= PHASH_NEAR):
            found[t.ids[k]] = Match(t.ids[k], round(1.0 - float(dist[k]) / 64.0, 4), "phash", 0)
        q_pts, q_desc = orb_features(query)
        if len(q_desc) >= MIN_INLIERS:
            containment = np.minimum(t.hists, colour_hist(query)[None, :]).sum(axis=1)
            geometric = []
            for k in np.argsort(-containment, kind="stable")[: self._shortlist]:
                geo = self._geometry(q_pts, q_desc, int(k))
                if geo is not None:
                    geometric.append((geo[0], int(k), geo[1]))
            geometric.sort(key=lambda g: (-g[0], g[1]))
            for inliers, k, transform in geometric[: self._verify]:  # colour check only for the best few (PNG reads)
                score = round(min(1.0, inliers / FULL_GEO_INLIERS) * self._colour_score(query, t.ids[k], transform), 4)
                if t.ids[k] not in found or score > found[t.ids[k]].score:
                    found[t.ids[k]] = Match(t.ids[k], score, "orb", inliers)
        return sorted(found.values(), key=lambda m: (-m.score, m.image_id))[:limit]


_PROCESS_INDEX: ReverseIndex | None = None  # the index of a search process (set by its initializer)


def _search_process_init(table_dir: str, ids: list[str], images: dict[str, Path]) -> None:
    global _PROCESS_INDEX
    start_as_server_child()
    cv2.setNumThreads(1)  # one search per process
    _PROCESS_INDEX = ReverseIndex(FeatureTable.mapped(Path(table_dir), ids), images)


def _process_search(query: np.ndarray, limit: int) -> list[Match]:
    assert _PROCESS_INDEX is not None, "a search process without its index"
    return _PROCESS_INDEX.search_normalized(query, limit=limit)


class SearchProcesses:
    """Reverse searches in ``processes`` spawned processes that memory-map the index's arrays (``table_dir``, written
    by :meth:`FeatureTable.save_arrays`) read-only, so the page cache holds them once however many processes (of
    however many ``--workers``) search.

    Why processes: a search is ~0.1-1 s of mostly GIL-holding Python around OpenCV calls; in threads of the server's
    process it takes the GIL from the event loop in 5 ms slices, so every cheap call waits behind it. Only the
    normalized query (512 px long side, <1 MB) goes to a process; matches come back.

    Why spawned, not forked: a process forked from the running server (or from a test process running Ray's and the
    pools' threads) inherits locks that another thread held at the fork, and a search hung in one. A spawned process
    starts clean, at the cost of importing OpenCV once (about a second, on its first search).
    """

    def __init__(self, table_dir: Path, ids: list[str], images: dict[str, Path], processes: int) -> None:
        self._pool = ProcessPoolExecutor(
            processes,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_search_process_init,
            initargs=(str(table_dir), ids, images),
        )

    @property
    def pids(self) -> list[int]:
        return list(self._pool._processes)  # the executor names no public accessor

    def submit(self, query: np.ndarray, limit: int) -> Future[list[Match]]:
        return self._pool.submit(_process_search, query, limit)

    def close(self, *, wait: bool = False) -> None:
        """Stop the processes; ``wait``: until they have exited (a process about to exit must: its exit stops the
        queue that would tell them to)."""
        self._pool.shutdown(wait=wait, cancel_futures=True)
