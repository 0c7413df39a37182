"""Variable elimination kernels against brute-force enumeration over all K^n latent fields,
on small graphs with cycles; every elimination order agrees; pgmpy agrees (if installed)."""
import itertools

import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import logsumexp

from approxcv.errors import GraphTooWideError
from approxcv.inference import elimination as el

#: 7 nodes, two triangles, a 4-cycle through them and a pendant node
EDGES = [(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (4, 5), (5, 3), (6, 5), (0, 4)]
N, K = 7, 2


def _configs(n=N, k=K):
    return np.array(list(itertools.product(range(k), repeat=n)))


def _field(seed, k=K, n=N, edges=EDGES):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, k)), rng.normal(size=(len(edges), k, k))


def _energies(unary, pairwise, edges=EDGES):
    """``sum_t unary[t, z_t] + sum_e pairwise[e, z_s, z_t]`` of every configuration."""
    z = _configs(unary.shape[0], unary.shape[1])
    out = unary[np.arange(unary.shape[0]), z].sum(1)
    for e, (s, t) in enumerate(edges):
        out = out + pairwise[e][z[:, s], z[:, t]]
    return z, out


def test_log_partition_and_marginals_match_enumeration():
    unary, pairwise = _field(0, k=3)
    z, energy = _energies(unary, pairwise)
    plan = el.build_plan(N, EDGES)
    assert plan.width == el.induced_width(N, EDGES, plan.order) == 2
    post = el.site_marginals(plan, jnp.asarray(unary), jnp.asarray(pairwise))
    log_z = logsumexp(energy)
    p = np.exp(energy - log_z)
    brute = np.stack([[p[z[:, t] == k].sum() for k in range(3)] for t in range(N)])
    np.testing.assert_allclose(float(post.log_normalizer), log_z, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(post.marginals), brute, atol=1e-12)


def test_every_elimination_order_gives_the_same_value():
    unary, pairwise = _field(1)
    ref = float(logsumexp(_energies(unary, pairwise)[1]))
    rng = np.random.default_rng(0)
    orders = [tuple(range(N)), tuple(reversed(range(N)))] + [
        tuple(rng.permutation(N))]
    widths = set()
    for order in orders:
        plan = el.build_plan(N, EDGES, order)
        widths.add(plan.width)
        np.testing.assert_allclose(float(el.log_partition(
            plan, jnp.asarray(unary), jnp.asarray(pairwise))), ref, rtol=1e-12)
    assert len(widths) > 1      # the orders really differ in the factors they build
    with pytest.raises(ValueError, match="permutation"):
        el.build_plan(N, EDGES, (0, 1, 2))


def _brute_weighted(h, pair, log_lik, w, scheme):
    """Seed eq. 4-5 by enumeration: weighted joint and weighted field normaliser."""
    z, prior = _energies(h, pair) if scheme == "A" else _energies(
        h * w[:, None], pair * np.array([w[s] * w[t] for s, t in EDGES])[:, None, None])
    emit = (log_lik * w[:, None])[np.arange(N), z].sum(1)
    return logsumexp(prior + emit) - logsumexp(prior)


@pytest.mark.parametrize("scheme", ["A", "B"])
def test_weighted_marginal_likelihood_matches_enumeration(scheme):
    h, pair = _field(2)
    log_lik = np.random.default_rng(3).normal(scale=2.0, size=(N, K))
    plan = el.build_plan(N, EDGES)
    for w in (np.ones(N), np.array([1, 0, 1, 1, 0.3, 1, 0]), np.full(N, 0.5)):
        got = el.weighted_log_marginal(plan, jnp.asarray(h), jnp.asarray(pair),
                                       jnp.asarray(log_lik), jnp.asarray(w), scheme)
        np.testing.assert_allclose(float(got), _brute_weighted(h, pair, log_lik, w, scheme),
                                   rtol=1e-11, atol=1e-11)


def test_scheme_b_drops_a_site_with_its_latent():
    """Scheme B with w_t = 0 is the marginal likelihood of the graph without site t."""
    h, pair = _field(4)
    log_lik = np.random.default_rng(5).normal(size=(N, K))
    plan = el.build_plan(N, EDGES)
    w = np.ones(N)
    w[6] = 0.0                                       # the pendant node
    got = el.weighted_log_marginal(plan, jnp.asarray(h), jnp.asarray(pair),
                                   jnp.asarray(log_lik), jnp.asarray(w), "B")
    keep = [e for e, (s, t) in enumerate(EDGES) if 6 not in (s, t)]
    small = el.build_plan(6, [EDGES[e] for e in keep])
    want = el.weighted_log_marginal(small, jnp.asarray(h[:6]), jnp.asarray(pair[keep]),
                                    jnp.asarray(log_lik[:6]), jnp.ones(6), "A")
    np.testing.assert_allclose(float(got), float(want), rtol=1e-12)


def test_heldout_losses_match_enumeration():
    h, pair = _field(6)
    log_lik = np.random.default_rng(7).normal(scale=2.0, size=(N, K))
    plan = el.build_plan(N, EDGES)
    w = np.array([1.0, 0, 1, 1, 0, 1, 1])
    fold, points = el.heldout_losses(plan, jnp.asarray(h), jnp.asarray(pair),
                                     jnp.asarray(log_lik), jnp.asarray(w))
    z, prior = _energies(h, pair)
    emit = log_lik[np.arange(N), z]                          # (configs, N)

    def log_p(sites):
        return logsumexp(prior + emit[:, sites].sum(1)) - logsumexp(prior)
    kept = [0, 2, 3, 5, 6]
    np.testing.assert_allclose(float(fold), log_p(kept) - log_p(list(range(N))), rtol=1e-11)
    for t in (1, 4):
        np.testing.assert_allclose(float(points[t]), log_p(kept) - log_p(kept + [t]),
                                   rtol=1e-11)
    assert np.all(np.asarray(points)[kept] == 0.0)


def test_too_wide_graph_is_refused_naming_width_states_and_memory():
    complete = [(s, t) for s in range(12) for t in range(s + 1, 12)]
    plan = el.build_plan(12, complete)
    assert plan.width == 11
    with pytest.raises(GraphTooWideError, match=r"induced width 11 with 4 states.*MiB"):
        el.check_memory(plan, 4, max_bytes=2 ** 20)


def test_pgmpy_agrees_on_a_small_markov_network():
    pytest.importorskip("pgmpy")
    from pgmpy.factors.discrete import DiscreteFactor
    from pgmpy.inference import VariableElimination
    try:
        from pgmpy.models import DiscreteMarkovNetwork as MarkovNetwork
    except ImportError:                     # pgmpy < 1.0
        from pgmpy.models import MarkovNetwork
    unary, pairwise = _field(8, k=3)
    net = MarkovNetwork([(f"z{s}", f"z{t}") for s, t in EDGES])
    net.add_factors(*[DiscreteFactor([f"z{t}"], [3], np.exp(unary[t])) for t in range(N)],
                    *[DiscreteFactor([f"z{s}", f"z{t}"], [3, 3], np.exp(pairwise[e]))
                      for e, (s, t) in enumerate(EDGES)])
    ve = VariableElimination(net)
    z_pgmpy = ve.query(["z0"], elimination_order="MinFill", show_progress=False).values.sum()
    got = el.log_partition(el.build_plan(N, EDGES), jnp.asarray(unary), jnp.asarray(pairwise))
    np.testing.assert_allclose(float(got), np.log(z_pgmpy), rtol=1e-11)


def _lattice(rows, cols):
    """Edges of a rows x cols lattice, row-major node ids, as HiddenPotts builds them."""
    edges = []
    for s in range(rows * cols):
        r, c = divmod(s, cols)
        edges += ([(s, s + 1)] if c < cols - 1 else []) + ([(s, s + cols)] if r < rows - 1 else [])
    return edges


def _lattice_log_z(unary, pairwise, rows, cols):
    """``log Z`` of a lattice field by the row transfer matrix (``K^cols`` row states)."""
    k = unary.shape[1]
    states = np.array(list(itertools.product(range(k), repeat=cols)))     # (S, cols)
    pw = {e: pairwise[i] for i, e in enumerate(_lattice(rows, cols))}

    def row_energy(r):
        ids = r * cols + np.arange(cols)
        out = unary[ids, states].sum(1)
        for c in range(cols - 1):
            out = out + pw[(ids[c], ids[c] + 1)][states[:, c], states[:, c + 1]]
        return out
    alpha = row_energy(0)
    for r in range(1, rows):
        between = sum(pw[(r * cols - cols + c, r * cols + c)][states[:, None, c],
                                                              states[None, :, c]]
                      for c in range(cols))                              # (S, S)
        alpha = logsumexp(alpha[:, None] + between, axis=0) + row_energy(r)
    return float(logsumexp(alpha))


_LATTICE_SCRIPT = """
import sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
from approxcv.inference import elimination as el
data = np.load(sys.argv[1])
edges = [tuple(e) for e in data["edges"]]
plan = el.build_plan(int(data["n"]), edges, el.min_fill_order(int(data["n"]), edges))
unary, pairwise = jnp.asarray(data["unary"]), jnp.asarray(data["pairwise"])
post = el.site_marginals(plan, unary, pairwise)        # the pairwise tensor a jit argument
print(repr(float(el.log_partition(plan, unary, pairwise))), repr(float(post.log_normalizer)),
      repr(float(np.abs(np.asarray(post.marginals).sum(1) - 1).max())))
"""


def test_lattice_with_a_crashing_edge_count_compiles_and_matches_transfer_matrix(tmp_path):
    """A 10 x 10 lattice with K = 2 (180 edges) killed the process: appending a zero row to
    the pairwise argument compiled to a pad kernel that crashes LLVM's loop vectoriser.
    Run in a subprocess (a crash fails the test instead of killing pytest), without the
    compilation cache (a cached program would skip the compilation that crashed)."""
    import os
    import subprocess
    import sys
    rows = cols = 10
    edges = _lattice(rows, cols)
    assert len(edges) == 180
    rng = np.random.default_rng(11)
    unary, pairwise = rng.normal(size=(rows * cols, 2)), 0.5 * rng.normal(size=(180, 2, 2))
    np.savez(tmp_path / "field.npz", edges=np.array(edges), n=rows * cols, unary=unary,
             pairwise=pairwise)
    import approxcv                        # the subprocess imports the same package
    root = os.path.dirname(os.path.dirname(approxcv.__file__))
    env = dict(os.environ, APPROXCV_NO_COMPILATION_CACHE="1",
               PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", _LATTICE_SCRIPT, str(tmp_path / "field.npz")],
                         capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    log_z, log_z_grad, marg_err = (float(v) for v in out.stdout.split()[-3:])
    want = _lattice_log_z(unary, pairwise, rows, cols)
    np.testing.assert_allclose([log_z, log_z_grad], want, rtol=1e-12)
    assert marg_err < 1e-12


def test_orders_agree_with_enumeration_to_1e10_and_narrowest_is_kept():
    """Every order the planner tries gives the same log Z (to 1e-10, against enumeration);
    the plan keeps the narrowest: on an 8 x 8 lattice min-fill has width 10, a row-major
    sweep 8."""
    unary, pairwise = _field(12, k=3)
    ref = float(logsumexp(_energies(unary, pairwise)[1]))
    for order in (el.min_fill_order(N, EDGES), el.min_degree_order(N, EDGES),
                  el.bandwidth_order(N, EDGES), tuple(range(N)), el.narrowest_order(N, EDGES)[0]):
        got = el.log_partition(el.build_plan(N, EDGES, order), jnp.asarray(unary),
                               jnp.asarray(pairwise))
        np.testing.assert_allclose(float(got), ref, rtol=0, atol=1e-10)
    lattice = _lattice(8, 8)
    assert el.induced_width(64, lattice, el.min_fill_order(64, lattice)) == 10
    assert el.build_plan(64, lattice).width <= 8
    assert el.degeneracy(64, lattice) == 2 <= el.build_plan(64, lattice).width


def test_a_lattice_that_fits_is_accepted_under_its_narrowest_order():
    """20 x 20, K = 2: min-fill's width 29 (an 8 GiB factor) was refused; a sweep has width
    20. Planning only (the elimination without gradients fits in 1 GiB)."""
    plan = el.plan_within(400, _lattice(20, 20), 2, differentiate=False)
    assert plan.width <= 20
    assert el.plan_bytes(plan, 2, differentiate=False) <= el.DEFAULT_MAX_BYTES


def test_a_lattice_far_too_wide_is_refused_by_name_before_ordering_it_whole():
    """60 x 60 took 232 s to be refused (whole min-fill order first); each order now stops
    once it is wider than any plan within the memory limit."""
    with pytest.raises(GraphTooWideError, match=r"induced width \d+ with 2 states"):
        el.plan_within(3600, _lattice(60, 60), 2)
    complete = [(s, t) for s in range(40) for t in range(s + 1, 40)]
    assert el.degeneracy(40, complete) == 39       # refused by the lower bound alone
    with pytest.raises(GraphTooWideError, match="at least 39 wide"):
        el.plan_within(40, complete, 2)


def test_memory_estimate_bounds_what_the_plan_allocates(monkeypatch):
    """plan_bytes >= the index arrays built at trace time + XLA's buffers (temporaries,
    arguments, outputs) of the compiled elimination, with and without gradients, with the
    gather indices precomputed or computed in each step. The 12 x 12 lattice with K = 3 was
    accepted at 0.96 GiB and then asked NumPy for 16.4 GiB: it is refused by name."""
    import jax
    built = []
    gather_index = el._gather_index

    def recording(*args, **kwargs):
        out = gather_index(*args, **kwargs)
        if isinstance(out, np.ndarray):
            built.append(out.nbytes)
        return out
    monkeypatch.setattr(el, "_gather_index", recording)
    graphs = [(N, EDGES, 3), (8, [(s, t) for s in range(8) for t in range(s + 1, 8)], 2)]
    for index_bytes in (el.INDEX_BYTES, 0):
        monkeypatch.setattr(el, "INDEX_BYTES", index_bytes)
        for n, edges, k in graphs:
            plan = el.build_plan(n, edges)
            args = (jnp.zeros((n, k)), jnp.zeros((len(edges), k, k)))
            for diff in (False, True):
                built.clear()

                def run(u, p, plan=plan, diff=diff):        # traced anew: indices counted
                    fun = el.log_partition.__wrapped__
                    return jax.value_and_grad(fun, (1, 2))(plan, u, p) if diff else fun(plan,
                                                                                       u, p)
                mem = jax.jit(run).lower(*args).compile().memory_analysis()
                real = sum(built) + (mem.temp_size_in_bytes + mem.argument_size_in_bytes
                                     + mem.output_size_in_bytes)
                assert el.plan_bytes(plan, k, diff) >= real, (n, k, diff, index_bytes)
    with pytest.raises(GraphTooWideError, match="with 3 states needs"):
        el.plan_within(144, _lattice(12, 12), 3)
