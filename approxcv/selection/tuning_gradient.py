"""The ALOOCV estimate of a regularised ERM model and its gradient in the penalty weights.

For a GLM-type model (:mod:`approxcv.models.erm`) with penalty ``lam^T r(theta)``, ALOOCV is
the ``ns`` method's leave-one-out estimate ``ACV(lam) = 1/n sum_i l_i(theta_i)`` (one Newton
step per sample from the full fit, Beirami et al. 2017); :mod:`approxcv.selection.tuning` tunes
``lam`` with it.

* :func:`aloocv_gradient` differentiates ``ACV`` with respect to the vector ``lam``:

  - ``"seed"`` (seed Lemma 4 / Corollary 5 / eq. 16): the exact LOO solution satisfies
    ``d theta^(i) / d lam = -H_{-i}(theta^(i))^{-1} d_lam grad r``; substituting the ALOOCV
    point ``theta_i`` gives ``dACV/dlam ~ -1/n sum_i [d_lam grad_theta(lam^T r)(theta_i)]^T
    H_{-i}(theta_i)^{-1} grad l_i(theta_i)``. Needs a new Hessian per sample at ``theta_i``
    (``O(n (n D^2 + D^3))``).
  - ``"full_fit_hessian"``: the same formula with ``H_{-i}`` kept at the full fit
    ``theta_hat``, from rank-one downdates of one factor (``O(n D^2)``). Identical to
    ``"seed"`` when the loss is quadratic.
  - ``"implicit"``: the exact derivative of the ALOOCV estimate itself, by implicit
    differentiation of ``theta_hat(lam)`` (``d theta_hat / d lam = -H^{-1} d_lam grad r``)
    and automatic differentiation of the closed-form (Sherman-Morrison) ALOOCV map.

* :func:`grid_aloocv` evaluates ``ACV`` at every row of a grid of weights in one compiled
  program: a damped Newton fit per row (:func:`approxcv.optim.newton.newton_minimize` with
  the GLM Hessian ``A^T diag(phi'') A + hess(lam^T r)``), then the closed form, the rows a
  continuation path from heavy to light penalty (each fit starts at the previous one) in
  one ``lax.scan`` — one dispatch for the whole grid instead of a fit and an estimate per
  point.

  Penalty weights are kept positive by optimising ``rho = log lam`` (``dACV/drho = lam *
  dACV/dlam``). Hessians are factored by the package's one jitter policy
  (:func:`approxcv.optim.jittered_cholesky`); more than a negligible jitter raises.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax import lax
import numpy as np

from .._runtime import jit, map_in_batches
from .._validate import check_choice
from ..engine import aloo
from ..errors import NotPositiveDefiniteError
from ..optim.newton import newton_minimize
from ..optim.pd import jittered_cholesky

__all__ = ["aloocv_gradient", "grid_aloocv", "GRADIENTS", "QUADRATIC_STOP",
           "FAST_COMPILE_ELEMENTS"]

GRADIENTS = ("implicit", "seed", "full_fit_hessian")

#: the GLM fits of the grid and of the tuning loop stop after an undamped Newton step whose
#: decrement (per sample) was at most this (:func:`approxcv.optim.newton.newton_minimize`):
#: the next would be of order 1e-28, so the pass that only confirms it is saved (breast
#: cancer's grid: 57 -> 50 Hessians; its fits and ALOOCV the same to 4e-13 and 1e-14)
QUADRATIC_STOP = 1e-14

#: the tuning programs (the grid's fits and ALOOCV, the Newton loop's step) compile with
#: XLA's fast-compile options when their array arguments hold at most this many elements
#: (:func:`approxcv._runtime.compile.jit`): a design of up to about 4,000 entries (80 x 10, a
#: scikit-learn check's data) runs in milliseconds, and compiling is its whole first call;
#: breast cancer's padded 576 x 33 design (19,000) keeps XLA's optimised code
FAST_COMPILE_ELEMENTS = 4096


def _factor(hess):
    """``(chol, reliable)`` of ``H`` by the jitter policy of :mod:`approxcv.optim.pd`; the
    jitter is chosen on a stopped-gradient copy, so the factor stays differentiable."""
    _, jitter, _, reliable = jittered_cholesky(jax.lax.stop_gradient(hess))
    eye = jnp.eye(hess.shape[0], dtype=hess.dtype)
    return jnp.linalg.cholesky(0.5 * (hess + hess.T) + jitter * eye), reliable


def penalty_hessian(penalty_fn, u, lam, aux):
    """``d2/du2 penalty_fn(u, lam, aux)``. A *separable* penalty (``penalty_fn.separable``:
    a sum of per-coefficient terms, e.g. ridge) has a diagonal Hessian, one ``jvp`` of its
    gradient along ``1``: ``diag(H) = (d/dt) grad r(u + t 1)`` — the tuning loop
    differentiates this twice more, where ``jax.hessian``'s ``D`` tangents cost the first
    call a third of its compile time; others by ``jax.hessian``."""
    if getattr(penalty_fn, "separable", False):
        diag = jax.jvp(lambda v: jax.grad(penalty_fn)(v, lam, aux), (u,),
                       (jnp.ones_like(u),))[1]
        return jnp.diag(diag)
    return jax.hessian(penalty_fn)(u, lam, aux)


# The building blocks below are jitted, so inside the tuning programs they are nested calls:
# each is traced once per argument shapes and its derivatives are transforms of that one
# trace, which the Newton loop's forward-over-reverse pass through two Newton maps and the
# closed form reuses (first tuning call with a filled cache 2.2-2.35 -> 1.9-2.0 s,
# tracing 3.4 -> 2.5 s over the tuning and an estimator's first fit; same programs, same
# run time)
@partial(jit, static_argnames=("loss_fn", "penalty_fn"))
def _objective(u, lam, design, y, aux, loss_fn, penalty_fn):
    """``F(u; lam) = sum_i phi(a_i^T u, y_i) + penalty(u, lam)`` of the smooth problem."""
    return jnp.sum(loss_fn(design @ u, y)) + penalty_fn(u, lam, aux)


@partial(jit, static_argnames=("loss_fn", "penalty_fn"))
def _hessian(u, lam, design, y, aux, loss_fn, penalty_fn):
    """``(terms, H)`` of the smooth problem at ``u``."""
    terms = aloo.glm_terms(loss_fn, design, y, u)
    return terms, aloo.glm_hessian(terms, penalty_hessian(penalty_fn, u, lam, aux))


@partial(jit, static_argnames=("loss_fn", "penalty_fn"))
def _acv_closed_form(u, lam, design, y, aux, subset, loss_fn, penalty_fn):
    """``ACV`` over ``subset`` by Sherman-Morrison (differentiable in ``u`` and ``lam``)."""
    terms, hess = _hessian(u, lam, design, y, aux, loss_fn, penalty_fn)
    chol, reliable = _factor(hess)
    sub = aloo.GLMTerms(*(t[subset] for t in terms))
    params = aloo.loo_newton_params_closed_form(chol, sub, u)
    eta = jnp.sum(params * sub.design, axis=1)
    return jnp.mean(loss_fn(eta, y[subset])), reliable


def _implicit(u, lam, design, y, aux, subset, loss_fn, penalty_fn):
    """ACV and its total derivative in ``lam`` through ``theta_hat(lam)``."""
    (acv, reliable), (g_u, g_lam) = jax.value_and_grad(
        _acv_closed_form, argnums=(0, 1), has_aux=True)(u, lam, design, y, aux, subset,
                                                         loss_fn, penalty_fn)
    _, hess = _hessian(u, lam, design, y, aux, loss_fn, penalty_fn)
    v = jsl.cho_solve((_factor(hess)[0], True), g_u)
    # d theta_hat / d lam = -H^{-1} B with B = d_lam grad_u penalty  (D, m)
    vb = jax.grad(lambda lm: jnp.vdot(v, jax.grad(penalty_fn)(u, lm, aux)))(lam)
    return acv, g_lam - vb, reliable


def _per_sample(i, u, lam, design, y, aux, chol, terms, loss_fn, penalty_fn, refresh):
    """ALOOCV loss of sample ``i``, its eq.-16 gradient contribution ``(m,)`` and whether
    the leave-one-out factor it used is reliable."""
    a, g, d = design[i], terms.grad[i], terms.curv[i]
    chol_i = aloo.cholesky_rank_one_downdate(chol, jnp.sqrt(jnp.maximum(d, 0.0)) * a)
    u_i = u + jsl.cho_solve((chol_i, True), g * a)
    eta_i = jnp.dot(a, u_i)
    loss_i, dloss = jax.value_and_grad(lambda e: loss_fn(e[None], y[i][None])[0])(eta_i)
    reliable = jnp.asarray(True)
    if refresh:   # seed eq. 16: leave-one-out Hessian at theta_i
        t_i, h_i = _hessian(u_i, lam, design, y, aux, loss_fn, penalty_fn)
        chol_i, reliable = _factor(h_i - t_i.curv[i] * jnp.outer(a, a))
    v = jsl.cho_solve((chol_i, True), dloss * a)
    grad_lam = -jax.grad(lambda lm: jnp.vdot(v, jax.grad(penalty_fn)(u_i, lm, aux)))(lam)
    return loss_i, grad_lam, reliable


@partial(jit, static_argnames=("loss_fn", "penalty_fn", "gradient", "batch_size"))
def _acv_and_gradient(u, lam, design, y, aux, subset, loss_fn, penalty_fn, gradient,
                      batch_size):
    """``(ACV over subset, dACV/dlam (m,), reliable)`` for one of :data:`GRADIENTS`."""
    if gradient == "implicit":
        return _implicit(u, lam, design, y, aux, subset, loss_fn, penalty_fn)
    terms, hess = _hessian(u, lam, design, y, aux, loss_fn, penalty_fn)
    chol, reliable = _factor(hess)
    losses, grads, ok = map_in_batches(
        lambda i: _per_sample(i, u, lam, design, y, aux, chol, terms, loss_fn, penalty_fn,
                              gradient == "seed"), subset, batch_size)
    return jnp.mean(losses), jnp.mean(grads, axis=0), reliable & jnp.all(ok)


def _problem_gradient(prob, gradient, subset, batch_size):
    acv, grad, reliable = _acv_and_gradient(
        prob.u, prob.lam, prob.design, prob.y, prob.aux, jnp.asarray(subset), prob.loss_fn,
        prob.penalty_fn, gradient, batch_size)
    if not (bool(reliable) and np.isfinite(float(acv))
            and np.all(np.isfinite(np.asarray(grad)))):
        raise NotPositiveDefiniteError(
            "the ALOOCV estimate or its gradient cannot be trusted: a (leave-one-out) Hessian "
            "is not positive definite at this `lam` (too little regularisation?)")
    return float(acv), np.asarray(grad)


def _full_fit(model, data, params):
    """``(prepared, n, u_full)``: prepare the data and fit unless ``params`` are given."""
    prepared, _, n = model.prepare(data)
    if params is None:
        params = model.fit(prepared)
    return prepared, n, model.params_to_flat(model.check_params(params, prepared))


def aloocv_gradient(model, data, params=None, *, gradient: str = "implicit", subset=None,
                    batch_size: int = 128):
    """ALOOCV estimate and its gradient with respect to the penalty weights ``lam``.

    Args:
        model: an ERM model; data: ``(X, y)``; params: its fit (fitted when ``None``;
            treated as stationary).
        gradient: one of :data:`GRADIENTS` (see the module docstring): ``"implicit"`` (exact
            derivative of the estimate), ``"seed"`` (seed eq. 16, Hessian at each
            leave-one-out point) or ``"full_fit_hessian"`` (eq. 16 with the Hessian kept at
            the full fit — cheaper, reuses the downdated factors).
        subset: indices of the samples whose LOO terms are averaged (default: all).
        batch_size: samples per vectorised batch (``"seed"``, ``"full_fit_hessian"``).

    Returns:
        ``(acv, grad (m,))`` with ``m`` the number of penalty weights (``model.lam_vector()``).

    Raises:
        NotPositiveDefiniteError: a Hessian needed more than a negligible jitter.
    """
    check_choice("gradient", gradient, GRADIENTS)
    prepared, n, u_full = _full_fit(model, data, params)
    subset = np.arange(n) if subset is None else np.asarray(subset, dtype=np.int64)
    return _problem_gradient(model.smooth_problem(prepared, u_full), gradient, subset,
                             batch_size)


@partial(jit, static_argnames=("loss_fn", "penalty_fn", "max_steps"),
         fast_compile_elements=FAST_COMPILE_ELEMENTS)
def _grid_fit_and_acv(lams, design, y, aux, loss_fn, penalty_fn, max_steps: int):
    """``(u (k, D), ACV (k,), ok (k,))`` at every row of ``lams (k, m)``, in the order
    given: the fit of ``F(u) = sum_i phi(a_i^T u, y_i) + lam^T r`` by damped Newton, then
    ALOOCV in closed form; ``ok``: the fit converged and its Hessian is positive definite.

    The rows are a continuation path: each fit starts at the previous row's fit where that
    converged (from zero otherwise), so rows ordered from heavy to light penalty (as
    :func:`grid_aloocv` orders them) each take a few Newton steps. The rows run in one
    ``lax.scan``: the breast cancer grid (9 weights, then padded to 640 x 33) in 0.018 s against
    0.022-0.031 s with every row from zero, ``vmap``ped (warm, minimum of 20 calls), and
    its program compiled in 1.9-2.1 s against 2.5 s."""
    n, dim = design.shape
    subset = jnp.arange(n)

    def objective(u, lam):
        return _objective(u, lam, design, y, aux, loss_fn, penalty_fn)

    def hessian(u, lam):
        return _hessian(u, lam, design, y, aux, loss_fn, penalty_fn)[1]

    def one(start, lam):
        res = newton_minimize(objective, start, lam, max_steps=max_steps, scale=float(n),
                              hess=hessian, quadratic_stop=QUADRATIC_STOP)
        acv, reliable = _acv_closed_form(res.u, lam, design, y, aux, subset, loss_fn,
                                         penalty_fn)
        ok = res.converged & jnp.all(jnp.isfinite(res.u))
        nxt = jnp.where(ok, res.u, jnp.zeros_like(start))
        return nxt, (res.u, acv, reliable & res.converged)
    _, out = lax.scan(one, jnp.zeros(dim, design.dtype), lams)
    return out


def grid_aloocv(model, data, lams, max_steps: int = 50):
    """ALOOCV of an ERM model at every row of ``lams`` ``(k, m)`` (``m`` weights as
    :meth:`~approxcv.models.erm.base.ERM.lam_vector`), in one compiled program.

    Returns:
        ``(u (k, D), acv (k,))``: the flat fits and ALOOCV; ``acv`` is ``inf`` where the
        Newton fit did not converge in ``max_steps`` steps or a Hessian is not positive
        definite (too little regularisation for the data), never a number from such a fit.
    """
    prepared = model.prepare(data)[0]
    lams = np.asarray(lams, np.float64)
    # heavy to light penalty: each fit starts at the previous one (a continuation path)
    order = np.argsort(-np.sum(np.log(lams), axis=1), kind="stable")
    u, acv, ok = _grid_fit_and_acv(jnp.asarray(lams[order]), model.design(prepared),
                                   prepared.y, model.penalty_aux(), model.loss,
                                   model.penalty, max_steps)
    back = np.argsort(order)
    acv, ok = np.asarray(acv)[back], np.asarray(ok)[back]
    return np.asarray(u)[back], np.where(ok & np.isfinite(acv), acv, np.inf)
