"""Conditional random fields (structured-CV paper, §5 and Appendix G): the linear-chain
CRF on per-token features, at the sentence level (LSCV) and the label level (LWCV), and a
fitted sklearn-crfsuite CRF as it is (:func:`from_crfsuite`)."""
from .crfsuite import crfsuite_data, from_crfsuite
from .data import CRFBucket, CRFData
from .linear_chain import LinearChainCRF, LinearChainCRFParams

__all__ = ["LinearChainCRF", "LinearChainCRFParams", "CRFData", "CRFBucket",
           "from_crfsuite", "crfsuite_data"]
