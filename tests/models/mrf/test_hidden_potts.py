"""HiddenPotts: objective against enumeration, EM and BFGS fits agree, IJ/NS against exact
leave-one-site-out and neighbourhood CV, bad input raises named errors."""
import itertools
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import gammaln, logsumexp

import approxcv as acv
from approxcv.errors import (GraphTooWideError, InvalidArgumentError, InvalidDataError,
                             InvalidGraphError)
from tests.conftest import backend_compiles

#: 9 sites: a 3 x 3 grid plus one diagonal (cycles of length 3 and 4)
N = 9


def _grid():
    adj = np.zeros((N, N), dtype=int)
    for s in range(N):
        r, c = divmod(s, 3)
        for t in ([s + 1] if c < 2 else []) + ([s + 3] if r < 2 else []):
            adj[s, t] = adj[t, s] = 1
    adj[0, 4] = adj[4, 0] = 1
    return adj


def _counts(seed=0):
    rng = np.random.default_rng(seed)
    z = np.array([0, 0, 1, 0, 1, 1, 0, 1, 1])
    return rng.poisson(np.array([2.0, 9.0])[z]).astype(float)


@pytest.fixture(scope="module")
def fitted():
    model = acv.models.HiddenPotts(_grid(), 2, beta=0.6, n_init=2)
    x = _counts()
    return model, x, model.fit(x)


def _enumerated_objective(beta, x, rates, w, scheme):
    """``F(theta, w)`` by summing over all ``2^9`` latent fields (default priors)."""
    z = np.array(list(itertools.product(range(2), repeat=N)))
    edges = [(s, t) for s in range(N) for t in range(s + 1, N) if _grid()[s, t]]
    ew = np.array([w[s] * w[t] if scheme == "B" else 1.0 for s, t in edges])
    prior = beta * sum(ew[e] * (z[:, s] == z[:, t]) for e, (s, t) in enumerate(edges))
    loglik = x[:, None] * np.log(rates) - rates - gammaln(x + 1)[:, None]
    emit = (w[:, None] * loglik)[np.arange(N), z].sum(1)
    log_prior = np.sum((1.1 - 1) * np.log(rates) - 1e-3 * rates)
    return -(logsumexp(prior + emit) - logsumexp(prior)) - log_prior


@pytest.mark.parametrize("scheme", ["A", "B"])
def test_objective_matches_enumeration(scheme):
    model = acv.models.HiddenPotts(_grid(), 2, beta=0.6)
    x, rates = _counts(), np.array([1.5, 8.0])
    w = np.array([1, 0, 1, 0.5, 1, 1, 0, 1, 1.0])
    want = _enumerated_objective(0.6, x, rates, w, scheme)
    got = model.objective(acv.models.HiddenPottsParams(rates), x, jnp.asarray(w), scheme)
    np.testing.assert_allclose(float(got), want, rtol=1e-11)


def test_a_new_beta_compiles_nothing_and_is_the_programs_argument(fitted):
    """beta is an argument of the fit's and the problem's programs: a fit at another beta
    compiles nothing, and the shared objective at that beta (its field's log Z too) is
    the enumerated one."""
    _, x, _ = fitted
    other = acv.models.HiddenPotts(_grid(), 2, beta=0.9, n_init=2)
    with backend_compiles() as compiled:
        params = other.fit(x)
    assert compiled[0] == 0 and other.fit_result_["method"] == "em"
    problem = acv.make_problem(other, x, params)
    w = np.array([1, 0, 1, 0.5, 1, 1, 0, 1, 1.0])
    got = problem.fun(problem.u_full, jnp.asarray(w), problem.data)
    np.testing.assert_allclose(float(got), _enumerated_objective(0.9, x, params.rates, w, "A"),
                               rtol=1e-11)


def test_em_and_gradient_fits_reach_the_same_optimum(fitted):
    model, x, params = fitted
    assert model.fit_result_["method"] == "em"
    bfgs = acv.models.HiddenPotts(_grid(), 2, beta=0.6, n_init=2, fit_em=False)
    other = bfgs.fit(x)
    assert bfgs.fit_result_["method"] == "bfgs"
    np.testing.assert_allclose(np.sort(other.rates), np.sort(params.rates), rtol=1e-6)
    assert params.rates.min() < 4.0 < params.rates.max()


def test_gaussian_em_m_step_converges():
    """EM rejects any M-step that raises F: converging from every start (then Newton to the
    gradient tolerance) checks the Gaussian closed-form M-step."""
    rng = np.random.default_rng(1)
    x = np.where(_counts() > 5, 3.0, -1.0) + 0.5 * rng.normal(size=N)
    model = acv.models.HiddenPotts(_grid(), 2, 0.6, "gaussian", n_init=2)
    params = model.fit(x)
    assert model.fit_result_["method"] == "em" and model.fit_result_["em_converged"].all()
    assert model.fit_result_["final_grad_norm"] < 1e-6
    np.testing.assert_allclose(np.sort(params.means), [-1.0, 3.0], atol=0.6)


def test_ij_tracks_exact_leave_one_site_out_and_blocks(fitted):
    """Scheme B (scheme A, and NS, run in the all-models table test, tests/test_protocol.py):
    three single sites, then three spatial blocks (a site with its neighbours)."""
    model, x, params = fitted
    blocks = acv.folds.neighbourhood(model.adjacency, radius=1, centres=[2, 6, 8])
    np.testing.assert_array_equal(blocks[0], [1, 2, 5])
    folds = acv.folds.Folds([[1], [4], [8]] + list(blocks), N)
    kw = dict(params=params, scheme="B", progress=False, warn=False)
    ij, exact = (acv.cross_validate(model, x, folds, m, **kw) for m in ("ij", "exact"))
    assert exact.diagnostics["exact_converged"].all()
    rel = np.abs(ij.fold_loss - exact.fold_loss) / exact.fold_loss
    assert np.all(rel[:3] < 0.05) and np.all(rel[3:] < 0.1), rel
    # the fold loss of one site is its point loss; a block's is not the sum of its points
    np.testing.assert_allclose(exact.fold_loss[:3], [p[0] for p in exact.point_loss[:3]],
                               rtol=1e-10)
    assert not np.allclose(exact.fold_loss[3:], [p.sum() for p in exact.point_loss[3:]])


def test_bad_input_raises_named_errors():
    adj = _grid()
    lopsided = adj.copy()
    lopsided[0, 8] = 1
    with pytest.raises(InvalidGraphError, match="not symmetric"):
        acv.models.HiddenPotts(lopsided, 2, 0.5)
    looped = adj.copy()
    looped[3, 3] = 1
    with pytest.raises(InvalidGraphError, match="self-loops"):
        acv.models.HiddenPotts(looped, 2, 0.5)
    alone = adj.copy()
    alone[8, :] = alone[:, 8] = 0
    with pytest.raises(InvalidGraphError, match="disconnected site"):
        acv.models.HiddenPotts(alone, 2, 0.5)
    complete = 1 - np.eye(14, dtype=int)
    with pytest.raises(GraphTooWideError, match="induced width 13 with 3 states"):
        acv.models.HiddenPotts(complete, 3, 0.5, max_bytes=2 ** 24)
    model = acv.models.HiddenPotts(adj, 2, 0.5)
    x = _counts()
    with pytest.raises(InvalidDataError, match="non-negative"):
        model.prepare(np.where(x > 5, -1.0, x))
    with pytest.raises(InvalidDataError, match="integer"):
        model.prepare(x + 0.5)
    with pytest.raises(InvalidDataError, match=r"shape \(9,\)"):
        model.prepare(x[:5])
    with pytest.raises(InvalidArgumentError, match="within"):
        model.prepare(x, "structure")
    assert model == acv.models.HiddenPotts(adj, 2, 0.5) and hash(model) == hash(
        acv.models.HiddenPotts(adj, 2, 0.5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert model != acv.models.HiddenPotts(adj, 2, 0.7)


def test_sparse_and_networkx_adjacency_give_the_dense_model():
    """A scipy.sparse adjacency failed with "dtype object"; sparse matrices and arrays and
    networkx graphs now give the model of the dense matrix (same edges, same objective);
    a bad sparse one raises the same named errors as a dense one."""
    from scipy import sparse
    adj = _grid()
    dense = acv.models.HiddenPotts(adj, 2, beta=0.6)
    rates = acv.models.HiddenPottsParams(np.array([1.5, 8.0]))
    want = float(dense.objective(rates, _counts(), jnp.ones(N)))
    others = [sparse.csr_matrix(adj), sparse.coo_array(adj.astype(bool)),
              sparse.lil_matrix(adj.astype(float))]
    try:
        import networkx
        others.append(networkx.from_numpy_array(adj))
    except ImportError:
        pass
    for other in others:
        model = acv.models.HiddenPotts(other, 2, beta=0.6)
        assert model.edges == dense.edges and model == dense, type(other)
        np.testing.assert_allclose(float(model.objective(rates, _counts(), jnp.ones(N))),
                                   want, rtol=1e-13)
    lopsided = adj.copy()
    lopsided[0, 8] = 1
    with pytest.raises(InvalidGraphError, match="not symmetric"):
        acv.models.HiddenPotts(sparse.csr_matrix(lopsided), 2, 0.5)
    looped = adj.copy()
    looped[3, 3] = 1
    with pytest.raises(InvalidGraphError, match="self-loops"):
        acv.models.HiddenPotts(sparse.csr_matrix(looped), 2, 0.5)
    alone = adj.copy()
    alone[8, :] = alone[:, 8] = 0
    with pytest.raises(InvalidGraphError, match="disconnected site"):
        acv.models.HiddenPotts(sparse.csr_matrix(alone), 2, 0.5)
    with pytest.raises(InvalidGraphError, match="only 0 and 1"):
        acv.models.HiddenPotts(sparse.csr_matrix(2 * adj), 2, 0.5)


def test_lattices_too_wide_with_gradients_are_refused_by_name():
    """12 x 12 with K = 3 was accepted at 0.96 GiB (the largest factor only) and then
    failed in NumPy with a raw MemoryError asking for 16.4 GiB: the whole plan, with the
    gradients the fit takes, is counted; 60 x 60 is refused in seconds, not minutes."""
    def lattice(n):
        a = np.zeros((n * n, n * n), dtype=np.int8)
        idx = np.arange(n * n).reshape(n, n)
        for s, t in [(idx[:, :-1], idx[:, 1:]), (idx[:-1], idx[1:])]:
            a[s.ravel(), t.ravel()] = a[t.ravel(), s.ravel()] = 1
        return a
    with pytest.raises(GraphTooWideError, match=r"with 3 states needs .* with gradients"):
        acv.models.HiddenPotts(lattice(12), 3, 0.5)
    with pytest.raises(GraphTooWideError, match="with 2 states"):
        acv.models.HiddenPotts(lattice(60), 2, 0.5)
    assert acv.models.HiddenPotts(lattice(8), 2, 0.5).induced_width <= 8
