"""aiohttp clients for online search, reverse-image and page-reader backends (see :mod:`.clients` for the
environment variables), returning the same record shapes as the offline world backends."""

from .clients import ImageResult, LensClient, PageResult, ReaderClient, SerpClient, TextResult
from .http import BackendError, RetryPolicy, TokenBucket

__all__ = ["BackendError", "ImageResult", "LensClient", "PageResult", "ReaderClient", "RetryPolicy", "SerpClient",
           "TextResult", "TokenBucket"]
