"""Conditional random fields (structured-CV paper, §5 and Appendix G): the linear-chain
CRF on per-token features, at the sentence level (LSCV) and the label level (LWCV)."""
from .data import CRFBucket, CRFData
from .linear_chain import LinearChainCRF, LinearChainCRFParams

__all__ = ["LinearChainCRF", "LinearChainCRFParams", "CRFData", "CRFBucket"]
