"""Multimodal Evidence Interface (Neos §3.2): turns raw page/image results into goal-conditioned observations."""
