"""Cross-validation methods, one module each, registered by name.

Every method is a function ``method(problem, folds, options) -> (fold_params, diagnostics)``:

* ``problem``: the :class:`~approxcv.problem.Problem` (objective and held-out functions of a
  flat unconstrained vector, data, the fitted vector);
* ``folds``: :class:`~approxcv.folds.Folds` (index arrays; weights are built per batch);
* ``options``: :class:`~approxcv.engine.options.Options`;
* ``fold_params``: ``(n_folds, D)`` unconstrained per-fold parameters;
* ``diagnostics``: a dict; ``diagnostics["unreliable"]``, when present, marks folds the
  method cannot vouch for: ``{cause: (n_folds,) bool}`` (causes named in
  :data:`approxcv.engine.diagnostics.UNRELIABLE_CAUSES`) or one ``(n_folds,)`` bool mask;
  they are listed in ``CVResult.diagnostics["unreliable_folds"]`` (by cause in
  ``["unreliable_causes"]``) and never passed off as estimates.

The held-out evaluation is the engine's (:func:`approxcv.engine.heldout.heldout_losses`),
not the method's, unless the method puts ``diagnostics["heldout"] = (fold_loss, points)``:
a model's own estimators do (:mod:`.model_estimators`: ``"la"``, ``"ep"``, ``"q"``,
``"tq"``, ``"waic_g"``, ``"waic_v"``, ``"is"``, and ``"exact"``/``"auto"`` for such a
model, a Gaussian process). Register your own with :func:`approxcv.engine.registry.register_method`
(``acv.register_method``).
"""
from . import auto, exact, ij, model_estimators, ns  # noqa: F401  (register the built-in methods)
