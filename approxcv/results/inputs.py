"""What a result was computed on (level, number of units, data digest), and the check that
results set side by side were computed on the same inputs."""
from __future__ import annotations

from collections.abc import Mapping

from ..errors import IncomparableResultsError

# ``CVResult`` (results/result.py) is named in annotations only and not imported: the
# result imports this module (CVResult.plot checks its reference with check_comparable)

__all__ = ["check_comparable"]


# what a level's units are: single observations ("within" a structure, or the "point"s of
# a GP's leave-one-out) or whole structures; results compare only on the same kind
_UNIT_KIND = {"within": "observation", "point": "observation", "structure": "structure"}


def _inputs(result: "CVResult") -> dict:
    """What ``result`` was computed on, for comparisons: its ``level`` and number of
    ``units`` (from the result itself) and the digest of its ``data`` (from its
    :attr:`~CVResult.fingerprint`; ``None``, unknown, for a result built by hand)."""
    fp = result.fingerprint if isinstance(result.fingerprint, Mapping) else {}
    return {"level": result.level, "units": int(result.folds.n), "data": fp.get("data")}


def _same_kind(a: str, b: str) -> bool:
    """Units at levels ``a`` and ``b`` are the same kind of thing (see ``_UNIT_KIND``)."""
    return a == b or _UNIT_KIND.get(a, a) == _UNIT_KIND.get(b, b)


def check_comparable(results: Mapping, *, check_data: bool = True,
                     purpose: str = "compared") -> None:
    """Raise :class:`~approxcv.errors.IncomparableResultsError` naming the first field
    (``level``, ``units``, ``data``) on which a result of ``results`` (``{label:
    CVResult}``) differs from the first one. Levels whose units are single observations
    (``"within"``, a GP's ``"point"``) compare with each other, not with ``"structure"``.
    A data digest that one side lacks (a result built by hand) is not compared;
    ``check_data=False`` skips the data."""
    names = list(results)
    ref = _inputs(results[names[0]])
    for name in names[1:]:
        got = _inputs(results[name])
        pair = f"results {names[0]!r} and {name!r}"
        if not _same_kind(got["level"], ref["level"]):
            raise IncomparableResultsError(
                f"{pair} were computed at different levels ({ref['level']!r} and "
                f"{got['level']!r}; field 'level' differs): their units are different things "
                f"(e.g. whole sentences and single labels), so they cannot be {purpose}; "
                "compute both at the same `level`")
        if got["units"] != ref["units"]:
            raise IncomparableResultsError(
                f"{pair} were computed on different numbers of units ({ref['units']} and "
                f"{got['units']}; field 'units' differs), so they cannot be {purpose} even "
                "where their fold indices agree; compute both on the same data")
        if check_data and None not in (ref["data"], got["data"]) and got["data"] != ref["data"]:
            raise IncomparableResultsError(
                f"{pair} were computed on different data (field 'data' differs: digest "
                f"{ref['data'][:12]}… and {got['data'][:12]}…), so they cannot be {purpose}; "
                "compute both on the same data"
                + (". If the models predict the same observations from different inputs "
                   "(e.g. two feature sets of a regression), pass check_data=False"
                   if purpose == "ranked" else ""))
