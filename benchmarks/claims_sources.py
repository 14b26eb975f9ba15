"""Where each claim of ``docs/claims.md`` comes from: one function per group of result JSONs that reads its figures.

Every claim is a dict (:func:`claim`): its ``parts`` are estimates (:func:`part`) or measurements (:func:`measured`),
``direction`` +1 where the claim says higher, -1 lower, 0 a difference either way or a measurement, and where the
verdict is not the rule's own, ``status`` (a withdrawn measurement) or ``no_mde`` (why the design has no MDE). A
t-based MDE is recomputed here from the JSON's standard error, degrees of freedom and Holm count
(``benchmarks.stats.detectable``: exact power), not read from the JSON, whose older runs stored the
normal-approximation MDE.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from benchmarks import RESULTS, read_json, stats
from benchmarks.llm_learning_report import SELECTED_ON, comparisons, without_seed

T_INTERVAL = "t-interval over seeds"
SMOL = "SmolLM2-135M-Instruct"
TEXT = "small text policy (policies/text.py), not a language model"
CPU = "2-core CPU"
H100 = "one NVIDIA H100"
POOL = "ALFWorld generated Look/Pick households, 4-5 receptacles"
SCORE = "native trainer, scoring the admissible actions, T = 0.4"
SEEDS = "training seeds (paired by seed)"
SELECTION_SEED = SELECTED_ON["alfworld_cpu"][0]  # alfworld_cpu's recipe was chosen on this seed's own validation
WITHOUT = f", without seed {SELECTION_SEED} (the selection seed)"
WITHDRAWN = {"S9"}  # a measurement its own data do not support


def load(name: str) -> Any:
    """A result JSON; one that is cut, empty or not UTF-8 is a ``ValueError`` naming it."""
    try:
        return read_json(RESULTS / name)
    except ValueError as error:  # a cut or empty file, or one not UTF-8
        raise ValueError(f"{RESULTS / name} cannot be read ({type(error).__name__}): restore it, or rerun its "
                         "benchmark") from None


def part(f: Mapping[str, Any], label: str = "", method: str | None = None, secondary: bool = False,
         short: str | None = None) -> dict[str, Any]:
    """One estimate of a JSON (``benchmarks.stats``' field names) as the ledger shows it, significant by Holm's
    decision where the JSON made one, else by the interval excluding 0 (and McNemar's p below 0.05 where it has one).
    A ``secondary`` part is shown beside the claim's verdict, not counted in it; ``short`` names it in the digest."""
    has_t = all(isinstance(f.get(k), (int, float)) and math.isfinite(f[k]) for k in ("se", "df"))
    level = stats.ALPHA / max(1, int(f.get("m") or 1))  # the MDE at the JSON's own Holm level, by exact power
    out = {"label": label, "short": short or label, "estimate": f.get("diff"), "low": f.get("low"),
           "high": f.get("high"), "method": f.get("interval") or method or "",
           "mde": stats.detectable(f, level) if "gained" in f or has_t else f.get("mde"),
           "secondary": secondary, "p_holm": f.get("p_holm")}
    if f.get("se") == 0 and f.get("diff") == 0 and "gained" not in f:  # [0, 0] and MDE 0 would read as a measurement
        out |= {"estimate": None, "method": "the two arms are identical on every seed: nothing is compared", "mde": None}
    if isinstance(c := f.get("clustered"), Mapping):
        out["by_task"] = {"low": c["low"], "high": c["high"], "clusters": c.get("clusters"), "unit": c.get("unit")}
    excludes = f.get("low") is not None and (f["low"] > 0 or f["high"] < 0)
    p_ok = f.get("p") is None or (isinstance(f["p"], float) and f["p"] < 0.05)
    decided = f.get("holm_significant") if f.get("holm_significant") is not None else f.get("shown")
    out["significant"] = bool(decided) if decided is not None else bool(excludes and p_ok)
    return out | {k: None for k in ("estimate", "low", "high", "mde")  # (a NaN figure is shown as none)
                  if isinstance(out[k], float) and not math.isfinite(out[k])}


def measured(figure: str, label: str = "", **extra: Any) -> dict[str, Any]:
    """A measurement as a claim's part: its figure in place of an estimate, no interval, not judged."""
    return {"label": label, "estimate": None, "low": None, "high": None, "method": figure, "mde": None,
            "significant": False, "secondary": False} | extra


def holm_family(family: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A JSON's Holm family (what its benchmark corrected together), each part given its Holm-adjusted p ``p_holm``
    where the JSON stored none (a ``ValueError`` where the ``m`` its parts state is not the family's size)."""
    p_values = [p.get("p", float("nan")) for p in family]
    m = sum(math.isfinite(x) for x in p_values)
    stated = {p.get("m") for p in family} - {None}
    if stated and stated != {m}:
        raise ValueError(f"a Holm family of {m} comparisons whose parts state m = {sorted(stated)}")
    for p, adjusted in zip(family, stats.holm_adjusted(p_values)):
        p.setdefault("p_holm", adjusted)
    return family


def claim(id_: str, area: str, text: str, scope: dict[str, str], unit: str, n: int, parts: list[dict],
          direction: int, source: str, digest: tuple[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": id_, "area": area, "claim": text, "scope": scope, "unit": unit, "n": n, "parts": parts,
            "direction": direction, "source": f"benchmarks/results/{source}", "digest": digest} | extra


def scope(env: str, model: str = SMOL, mode: str = SCORE, device: str = CPU) -> dict[str, str]:
    return {"env": env, "model": model, "mode": mode, "device": device}


def endpoints() -> list[dict[str, Any]]:
    one_run = f"paired validation episodes; {load('alfworld_cpu_pool_endpoint.json')[0]['units']}"
    pool, rows = f"{POOL}; a pool of 16", []
    for id_, text, env, source, labels, digest in (
            ("L1", "Positive control: the update learns its own 4 training households (10 iterations)",
             "4 ALFWorld households", "alfworld_cpu_control_endpoint.json", ["trained tasks"],
             ("Positive control: does it learn its own training tasks?", "SmolLM2, 4 ALFWorld tasks, CPU")),
            ("L2", "Pool protocol (registered): ECPO learns its 16 households in 16 iterations", pool,
             "alfworld_cpu_pool_endpoint.json", ["the pool (primary)", "unseen 48 households"],
             ("Does ECPO learn a registered pool of 16 households?", "SmolLM2, ALFWorld pool, CPU")),
            ("L3", "Pool protocol: GiGPO w/std learns the same pool", pool, "alfworld_cpu_pool_gigpo_std_endpoint.json",
             ["the pool", "unseen 48 households"], None)):
        paired = load(source)[0]["paired"]
        parts = [part(paired[key], label, secondary=key == "unseen") for key, label in zip(("trained", "unseen"), labels)]
        rows.append(claim(id_, "learning", text, scope(env), one_run, paired["trained"]["episodes"], parts, +1, source,
                          digest))
    gpu = load("gpu_run.json")["parts"]["learning"]
    return rows + [claim(
        "L4", "learning", "An LLM learns unseen households on a GPU (alfworld_gpu, 24 ECPO iterations)",
        scope(f"{POOL}, alfworld_gpu 16 x 8", device=H100), one_run, gpu["validation"]["episodes"],
        [part(gpu["validation"], "unseen 400 households x 2"),
         part(gpu["training_tasks"], "training tasks", secondary=True)],
        +1, "gpu_run.json", ("Does an LLM learn unseen households on a GPU?", "SmolLM2, alfworld_gpu, T = 0.4, one H100"))]


def _llm(name: str, kind: str, a: str, b: str | None = None, without: bool = False) -> list[dict[str, Any]]:
    """``kind`` comparisons for ``a`` (against ``b``) in the LLM JSON ``name`` by N, ``without`` the selection seed."""
    results = load(name)["results"]
    parts = comparisons(without_seed(results, SELECTION_SEED) if without else results)
    return sorted((p for p in parts if (p["kind"], p["a"]) == (kind, a) and b in (None, p["b"])), key=lambda p: int(p["N"]))


def _by_n(parts: list[dict[str, Any]], suffix: str = "", secondary: bool = False) -> list[dict[str, Any]]:
    return [part(p, f"N = {p['N']}{suffix}", T_INTERVAL, secondary=secondary) for p in parts]


def seed_comparisons() -> list[dict[str, Any]]:
    llm, alf = "llm_learning.json", "llm_learning_alfworld_cpu_pairs.json"
    pipelined = load("pipelined_learning.json")["comparisons"]
    for measure in dict.fromkeys(c["measure"] for c in pipelined):  # a Holm family per measure (m = 2 each)
        holm_family([c for c in pipelined if c["measure"] == measure])
    lag = next(p for p in pipelined if p["comparison"] == "ecpo_lag1 - gigpo_std_lag1"
               and p["measure"].startswith("final exact success"))
    lag0 = next(p for p in pipelined if p["comparison"] == "ecpo_lag1 - ecpo_lag0")
    # the same on the final validation, clustered by seed: every seed validates the same number of episodes, so the
    # cluster-robust interval of the pooled difference is the t-interval over the seeds' success rates
    final = {arm: {r["seed"]: r["val_success_after"] for r in load("pipelined_learning.json")["runs"] if r["arm"] == arm}
             for arm in ("ecpo_lag1", "ecpo_lag0")}
    lag0_by_seed = stats.paired_diff(list(stats.paired_values(*final.values(), label="ecpo_lag1 - ecpo_lag0")[1]))
    pair_report = load("alfworld_cpu_pool_pair_seed0.json")
    pair, pair_units = pair_report["paired"], pair_report["units"]
    rllib = {c["claim"]: c for c in holm_family(load("rllib_llm_learning.json")["comparisons"])}
    corridor_scope = scope("4-room LLM corridor (corridor_llm)", mode="native trainer, exact success")
    learned, grpo = _llm(llm, "learned", "ecpo"), _llm(llm, "vs", "grpo", "gigpo_std")
    corridor = _llm(llm, "vs", "ecpo", "gigpo_std")
    alf_learned, alf_vs = _llm(alf, "learned", "ecpo"), _llm(alf, "vs", "ecpo", "gigpo_std")
    return [
        claim("L5", "learning", "ECPO training of an LLM raises late success over the start (corridor)",
              corridor_scope, SEEDS, learned[0]["n"], _by_n(learned), +1, llm,
              ("Does ECPO training of an LLM learn the corridor?", "SmolLM2, LLM corridor, CPU")),
        claim("L6", "learning", "ECPO raises success on unseen small ALFWorld households (alfworld_cpu, 6 iterations; "
              f"the recipe was chosen on seed {SELECTION_SEED})", scope(POOL), SEEDS, alf_learned[0]["n"],
              _by_n(alf_learned) + _by_n(_llm(alf, "learned", "ecpo", without=True), WITHOUT, True), +1, alf),
        claim("E6", "comparison", "Pipelined rollouts (lag 1) against lag 0 (ECPO): a difference in final exact success? "
              "(no equivalence margin was registered, so a null reads 'no difference shown', not 'as well as')",
              corridor_scope | {"mode": "RLlib, 2 runners, lag 1 vs lag 0"}, SEEDS, lag0["n"],
              [part(lag0, "final exact success", T_INTERVAL),
               part(lag0_by_seed, "final validation episodes, clustered by "
                    "seed (the seed's success rate as the unit)", T_INTERVAL, secondary=True)],
              0, "pipelined_learning.json"),
        claim("E1", "comparison", "ECPO beats GiGPO w/std in late success (corridor, N = 4 and 8)", corridor_scope,
              SEEDS, corridor[0]["n"], _by_n(corridor), +1, llm,
              ("Does ECPO beat GiGPO w/std when training an LLM?", "SmolLM2, LLM corridor, CPU")),
        claim("E7", "comparison", "GRPO against GiGPO w/std in late success (corridor): a difference either way? "
              "(in the LLM study's Holm family; 3 seeds)", corridor_scope, SEEDS, grpo[0]["n"],
              _by_n(grpo), 0, llm,
              ("Does GRPO differ from GiGPO w/std when training an LLM?", "SmolLM2, LLM corridor, CPU")),
        claim("E2", "comparison", "ECPO beats GiGPO w/std in final exact success, 10 seeds (pipelined RLlib, lag 1)",
              corridor_scope | {"mode": "RLlib, 2 runners, pipelined (lag 1)"}, SEEDS, lag["n"],
              [part(lag, "final exact success", T_INTERVAL)], +1, "pipelined_learning.json",
              ("ECPO vs GiGPO w/std over 10 seeds?", "SmolLM2, LLM corridor, RLlib lag 1, CPU")),
        claim("E3", "comparison", "ECPO beats GiGPO w/std on small ALFWorld households (alfworld_cpu; the recipe was "
              f"chosen on seed {SELECTION_SEED})", scope(POOL), SEEDS, alf_vs[0]["n"],
              _by_n(alf_vs) + _by_n(_llm(alf, "vs", "ecpo", "gigpo_std", without=True), WITHOUT, True), +1, alf),
        claim("E4", "comparison", "ECPO beats GiGPO w/std on the pool: one seed pair (conditional on that pair)",
              scope(f"{POOL}; a pool of 16"), f"paired validation episodes; {pair_units}", pair["trained"]["episodes"],
              [part(pair["trained"], "the pool") | {"mde": None},
               part(pair["unseen"], "unseen", secondary=True) | {"mde": None}], +1, "alfworld_cpu_pool_pair_seed0.json",
              ("ECPO vs GiGPO w/std on the ALFWorld pool?", "SmolLM2, ALFWorld pool, CPU"),
              no_mde="no MDE: one seed pair, and the seed is the unit of a comparison of methods"),
        claim("E5", "comparison", "RLlib (2 runners) against the native trainer: a difference in exact-success gain? "
              "(no equivalence margin was registered, so a null reads 'no difference shown', not 'learns like')",
              corridor_scope | {"mode": "RLlib 2 runners vs native"}, SEEDS, rllib["rllib gain - native gain"]["n"],
              [part(rllib["rllib exact-success gain"], "RLlib gain", T_INTERVAL, secondary=True),
               part(rllib["native exact-success gain"], "native gain", T_INTERVAL, secondary=True),
               part(rllib["rllib gain - native gain"], "RLlib - native", T_INTERVAL)], 0, "rllib_llm_learning.json",
              ("RLlib (2 runners) against native: a difference in gain?", "SmolLM2, LLM corridor, CPU")),
    ]


def grpo_rows(payload: Mapping[str, Any], envs: Mapping[str, dict[str, str]], first: int) -> list[dict[str, Any]]:
    """The credit study's GRPO rows, which its registered claims left out: GRPO against GiGPO w/std (a difference
    either way) and ECPO against GRPO (ECPO claims higher), final success paired by seed, Holm-corrected as one
    family of their own (added after the study: not part of its registered family)."""
    questions = (("grpo", "gigpo_std", "final success, GRPO - GiGPO w/std", 0,
                  "GRPO against GiGPO w/std: a difference in final success? (added after the study)"),
                 ("ecpo", "grpo", "final success, ECPO - GRPO", +1,
                  "ECPO beats GRPO in final success (added after the study)"))
    cells: dict[tuple[str, str, int], dict[Any, float]] = {}
    for r in payload["runs"]:
        cells.setdefault((r["env_name"], r["method"], r["group_size"]), {})[r["seed"]] = r["final_success"]
    family = {(env, a, b, direction, text): [
        {"label": label, "N": n, **stats.paired_diff(list(stats.paired_values(cells[env, a, n], cells[env, b, n])[1]))}
        for n in sorted({n for e, method, n in cells if e == env and method in (a, b)})]
        for env in envs for a, b, label, direction, text in questions}
    stats.apply_holm([p for parts in family.values() for p in parts],
                     [key[3] or 1 for key, parts in family.items() for _ in parts])
    return [claim(f"K{first + k}", "credit", text, envs[env], SEEDS, parts[0]["n"], _by_n(parts), direction,
                  "credit_study.json") for k, ((env, _a, _b, direction, text), parts) in enumerate(family.items())]


def credit() -> list[dict[str, Any]]:
    payload = load("credit_study.json")
    study = payload["summary"]
    holm_family([p for c in study["claims"] for p in c["parts"]] + study["readings"]["parts"])
    same = study["same_as_grpo"]["webshop"]
    envs = {"diagnostic": scope("diagnostic corridor (tabular)", "tabular policy", "native trainer"),
            "webshop": scope(f"WebShop (tabular, d_min = 7 on 8-step episodes: rho ~ 0; ECPO = GRPO in {same['equal']}/"
                             f"{same['total']} cells)", "tabular policy", "native trainer")}
    digests = {("C3", "diagnostic"): ("Tabular: ECPO vs GiGPO w/std in final success?", "diagnostic corridor, CPU"),
               ("C6", "diagnostic"): ("Tabular: does ECPO lower the advantage range?", "diagnostic corridor, CPU"),
               ("C1", "diagnostic"): ("Tabular: do divergent anchors grow more frequent?", "diagnostic corridor, CPU")}
    rows = []
    for c in study["claims"]:  # the credit study's claims C1-C7, each on each environment
        welch = all(str(p["a"]).startswith("N=") for p in c["parts"])  # C7: runs at two N share no training
        unit, method = (("training runs (independent: N against N, Welch)", "Welch t-interval") if welch else
                        (SEEDS, T_INTERVAL))
        rows.append(claim(f"K{len(rows) + 1}", "credit", f"{c['id']}: {c['claim']}", envs[c["env"]], unit,
                          c["parts"][0]["n"], [part(p, f"{p['label']}, N = {p['N']}", method, short=f"N = {p['N']}")
                                               for p in c["parts"]],
                          c["parts"][0]["direction"], "credit_study.json", digests.get((c["id"], c["env"]))))
    rows += grpo_rows(payload, envs, len(rows) + 1)
    registered = load("credit_counterfactual_claim.json")
    reg, explore = registered["registration"], registered["exploratory"]
    seeds = f"{min(explore['seeds'])}-{max(explore['seeds'])}"
    parts = [measured(f"{explore[e]['cells_below']}/{explore[e]['cells']} below 0, p {explore[e]['p']:.3g}",
                      f"{e}, exploratory: seeds {seeds}", secondary=True) for e in reg["estimators"]]
    rows.append(claim(f"K{len(rows) + 1}", "credit", "B1: one ECPO update raises log pi(rare|s) at lucky singletons "
                      "less than GiGPO w/std's (registered claim-level test)",
                      scope("corridors (tabular, SmolLM2)", f"tabular, {SMOL}", "one update from the same checkpoint"),
                      f"training runs (arm x checkpoint seed; {3 * len(reg['checkpoint_seeds'])} planned)", 0, parts,
                      -1, "credit_counterfactual_claim.json",
                      ("Does an ECPO update push lucky singletons less (App. C)?", "corridors, CPU")))
    return rows


def real_alfworld_text(agents: Mapping[str, list[dict[str, Any]]]) -> str:
    """S10's figures: each agent's wins, the warm start minus the untrained model paired by game (one seed, the same
    episode draws), the median seconds of an untrained episode."""
    untrained = next(games for name, games in agents.items() if "untrained" in name)
    warm = next(games for name, games in agents.items() if "warm start" in name)
    seconds = sorted(g["seconds"] for g in untrained)
    won = {g["task_id"]: g["success"] for g in warm}
    p = stats.paired_outcomes({g["task_id"]: g["success"] for g in untrained}, won, label="S10")
    detects = "" if any(g["success"] for g in untrained) else f"; detects {stats.mde_from_none_won(len(won))[1]:.2f}"
    text = (f"untrained {sum(g['success'] for g in untrained)}/{len(untrained)}, warm start {sum(won.values())}/"
            f"{len(won)} ({p['diff']:+.2f} [{p['low']:+.2f}, {p['high']:+.2f}], p {p['p']:.2f}{detects})")
    return (text + f", expert {sum(g['success'] for g in agents['expert'])}/{len(agents['expert'])}; "
            f"{seconds[len(seconds) // 2]:.0f} s/episode")


def speed() -> list[dict[str, Any]]:
    overhead, engines = load("credit_overhead.json"), load("alfworld_engines.json")
    differential, memory = load("alfworld_differential.json"), load("memory.json")
    gpu = load("gpu_run.json")["parts"]
    paper, learning = gpu["paper_iteration"], gpu["learning"]
    generation, webshop = load("generation_profile.json"), load("env_throughput_webshop.json")["sizes"]["1000"]
    rllib_before, rllib_after = load("rllib_memory_before.json"), load("rllib_memory_after.json")
    pipelined = load("pipelined_rollouts.json")["cases"]["smollm2"]
    real = load("paper_alfworld_cpu.json")["agents"]
    untrained = next(games for name, games in real.items() if "untrained" in name)
    memory_k = load("candidate_memory.json")["figures"]
    peaks = {stage: max(f[stage]["peak_gb"] for f in memory_k.values()) for stage in ("sft after", "update after")}
    before_80 = {stage: memory_k["80"][stage]["peak_gb"] for stage in ("sft before", "update before")}
    ratio = stats.ratio_of_means(*(pipelined["lags"][k]["seconds_per_iteration"] for k in ("0", "1")))  # lag 0 / 1
    short = {"S9": f"{ratio['ratio']:.2f}x [{ratio['low']:.2f}, {ratio['high']:.2f}] (ratio of means)"}
    gb_7b = next(c["total_gb"] for c in memory["computed"]
                 if c["model"] == "Qwen2.5-7B" and c["setting"].startswith("FSDP2"))
    rows = [
        ("S1", "Credit's cost: ECPO's time over GiGPO w/std's", scope(f"{overhead['batch']['rows']:,}-row batch", "-",
         "numpy, 1 thread"), f"median of {overhead['reps']} repetitions", overhead["reps"],
         f"{overhead['ratios']['ecpo_over_gigpo']:.2f}x ({overhead['median_ms']['ecpo']:.1f} ms)",
         "credit_overhead.json", ("What does credit cost?", "5,452-row batch, numpy, CPU")),
        ("S2", "The native ALFWorld engine: steps against TextWorld's, and identical play",
         scope("ALFWorld (3,693 games)", "-", "env step"), f"{differential['games_checked']:,} games compared step by step",
         differential["games_checked"], (f"{engines['ratios']['single_steps_per_s']:.0f}x TextWorld's steps/s; "
         f"{differential['mismatch_count']} mismatches in {differential['steps_compared']:,} steps"),
         "alfworld_engines.json", ("Is the native ALFWorld engine faithful and fast?", "ALFWorld, CPU")),
        ("S3", "The paper-shaped iteration on one GPU", scope("ALFWorldGen 16 x 8, 512-token replies, 2 steps",
         paper["model"], "full FT, bf16", H100), "one iteration", 1,
         (f"{paper['time/iteration']:.1f} s (generation {paper['time/generation']:.1f} s at "
          f"{paper['generation_tokens_per_s']:,.0f} tok/s), peak {paper['peak_memory_gib']:.1f} GiB"),
         "gpu_run.json", ("What does the paper-shaped iteration cost?", "Qwen2.5-1.5B shape, one H100")),
        ("S4", "SmolLM2 learning iteration on one GPU (alfworld_gpu)", scope(f"{POOL}, 16 x 8", device=H100),
         "iterations (mean)", learning["iterations_done"], (f"{learning['rates']['time/iteration']:.1f} s an "
         f"iteration, {learning['rates']['decisions_per_s']:.0f} decisions/s"), "gpu_run.json"),
        ("S5", "Memory of Qwen2.5-7B full fine-tuning under FSDP2 x 8 (computed, not measured)",
         scope("-", "Qwen2.5-7B", "FSDP2 x 8, checkpointing", "computed"), "one computation", 1,
         f"{gb_7b:.1f} GB per GPU", "memory.json", ("What fits on a GPU?", "Qwen2.5-7B, FSDP2 x 8, computed")),
        ("S6", "A decoding step of the transformers sampler on one GPU, bf16 weights against float32",
         scope(f"{generation['shape']['rows']} rows, {generation['shape']['prompt']}-token prompts",
               "Qwen2.5-1.5B architecture", "transformers generate", H100),
         f"{generation['shape']['tokens']} decoding steps", generation["shape"]["tokens"],
         "; ".join(f"{name}: {v['ms_per_step']:.1f} ms a step" for name, v in generation["variants"].items()),
         "generation_profile.json"),
        ("S7", "RLlib README example: the driver's peak memory, before and after issue 36's change",
         scope("LLM corridor", mode="RLlib, 2 env runners"), "one run each", 2,
         f"driver peak RSS {rllib_before['driver_peak_rss_mb']:,.0f} MB -> {rllib_after['driver_peak_rss_mb']:,.0f} MB",
         "rllib_memory_after.json"),
        ("S8", "A WebShop step at 1,000 products", scope("WebShop, 1,000 products", "-", "env step"), "steps timed",
         webshop["step"]["count"], (f"mean {webshop['step']['mean_ms']:.2f} ms, median "
         f"{webshop['step']['median_ms']:.2f} ms, p90 {webshop['step']['p90_ms']:.2f} ms"), "env_throughput_webshop.json"),
        ("S9", "Pipelined rollouts (lag 1) against lag 0: wall time per iteration, SmolLM2 on the LLM corridor",
         scope("LLM corridor", mode="RLlib, 2 env runners, one local learner"), "timed iterations per lag",
         len(pipelined["lags"]["1"]["seconds_per_iteration"]),  # (20 iterations a lag: ~25 min of a 2-core machine)
         (f"withdrawn: the 1.25x was a ratio of medians of {len(pipelined['lags']['0']['seconds_per_iteration'])} "
          f"iterations a lag; their ratio of means (lag 0 over lag 1) is {ratio['ratio']:.2f} [{ratio['low']:.2f}, "
          f"{ratio['high']:.2f}] (Fieller), Mann-Whitney p {ratio['p']:.2f}; not re-measured (needs >= 20 interleaved "
          "iterations a lag)"), "pipelined_rollouts.json",
         ("Do pipelined rollouts speed an iteration up?", "SmolLM2, LLM corridor, RLlib, CPU")),
        ("S10", "Real ALFWorld games on the CPU: the untrained model, a CPU-sized warm start, episode time",
         scope(f"ALFWorld valid_seen, {len(untrained) // 6} games per task type, 50 steps"), "games (one episode each)",
         len(untrained), real_alfworld_text(real), "paper_alfworld_cpu.json",
         ("SmolLM2 on real ALFWorld?", "valid_seen, CPU")),
        ("S11", "Peak resident memory of `ecpo sft` and the scoring update on real ALFWorld steps, 5-80 candidates",
         scope("ALFWorld valid_seen steps, 2 rows", mode=SCORE + ", bounded forwards"), "candidate counts", len(memory_k),
         (f"at most {peaks['sft after']:.2f} GB (sft) and {peaks['update after']:.2f} GB (update); before the "
          f"bound {before_80['sft before']:.2f} and {before_80['update before']:.2f} GB at 80 candidates"),
         "candidate_memory.json"),
    ]
    return [claim(id_, "speed", text, scope_, unit, n, [measured(figure, digest=short.get(id_, figure))], 0, source,
                  rest[0] if rest else None, **({"status": "withdrawn"} if id_ in WITHDRAWN else {}))
            for id_, text, scope_, unit, n, figure, source, *rest in rows]


# What a verdict of a testbed of the estimator comparison covers where the protocol fixes more than the env: every
# arm of the text-policy columns starts from one shared warm start and is judged on one fixed set of games
ESTIMATOR_SCOPE = {"alfworld_text": "one warm start, the 140 valid_seen games",
                   "households": "one warm start, the 120 held-out households"}


def estimator_table() -> dict[str, Any]:
    """Issue 57's comparison as the ledger shows it (its head says what a cell holds): one row per estimator, one
    column per testbed of the registered protocol (``benchmarks/estimator_comparison.yaml``)."""
    from benchmarks.estimator_comparison import RESULT_JSON, cell, load_protocol, machines_text

    protocol, result = load_protocol(), load(RESULT_JSON.name)
    table = result["table"]
    for testbed in {bed for cells in table.values() for bed in cells}:  # each testbed's 8 comparisons: one family
        holm_family([cells[testbed] for cells in table.values() if testbed in cells and not cells[testbed].get("reference")])
    testbeds = [t["name"] for t in protocol["testbeds"]]
    rows = [(arm, [cell(table.get(arm, {}).get(testbed), _estimator_cell) for testbed in testbeds])
            for arm in protocol["arms"]]
    seeds = {t["name"]: t.get("seeds", protocol.get("seeds")) for t in protocol["testbeds"]}
    headers = [f"{name} ({ESTIMATOR_SCOPE[name]})" if name in ESTIMATOR_SCOPE else name for name in testbeds]
    return {"testbeds": testbeds, "headers": headers, "rows": rows, "seeds": seeds,
            "machines": machines_text(result["runs"], testbeds), "source": RESULT_JSON.name,
            "warm_starts": warm_start_text(table)}


def _estimator_cell(p: Mapping[str, Any]) -> str:
    """An arm's cell: the difference, its unadjusted interval and verdict, what the ledger's head puts beside it."""
    beside = [stats.holm_miss_text(p) or stats.holm_p_text(p)]
    beside += [f"MDE {p['mde']:.3f}"] if not p["holm_significant"] and p.get("mde") else []
    text = f"{p['diff']:+.3f} [{p['low']:+.3f}, {p['high']:+.3f}]: {p['verdict']}"
    return text + (f" ({beside_text})" if (beside_text := "; ".join(b for b in beside if b)) else "")


def warm_start_text(table: Mapping[str, Any]) -> str:
    """Why a households verdict holds for one warm start (the pilot's and the study's order ECPO and GRPO apart)."""
    study = {arm: table[arm]["households"]["mean"] for arm in ("ecpo", "grpo")}
    pilot = load("households_text.json")
    warm, diff = pilot["warm_start"]["by_type"], pilot["comparisons"]["ecpo - grpo"]["diff"]
    return (f"A verdict of alfworld_text or households holds for the one warm start its arms shared and those games: "
            f"on households the pilot's warm start ({round(warm['All'] * warm['games'])} of {warm['games']} won; "
            f"`households_text.json`) and the study's, made by one command on two CPUs, order ECPO and GRPO the "
            f"other way round (ECPO - GRPO {diff:+.3f} in the pilot, {study['ecpo'] - study['grpo']:+.3f} between "
            "the study's arm means; descriptive: the pilot was not a comparison), so another warm start may order "
            "the arms otherwise.")


ARMS = {"ecpo": "ECPO", "gigpo_std": "GiGPO w/std", "grpo": "GRPO"}  # the text-policy studies' arms


def _minus_warm_start(result: Mapping[str, Any], first: int, text: str, env: str, warm_start: str, unit: str,
                      source: str, question: str, digest_scope: str) -> list[dict[str, Any]]:
    """Each arm of a text-policy study minus its warm start on the same games (the seed as the unit), as claims
    L{first}.. (``{games}`` and ``{share}`` in the texts: the games and the warm start's share of them won)."""
    warm = result["warm_start"]["by_type"]
    fill = {"games": warm["games"], "share": 100 * warm["All"]}
    scope_ = scope(env.format(**fill), TEXT, f"warm start (expert, {warm_start.format(**fill)}) then "
                   f"{result['protocol']['iterations']} iterations of group RL")
    rows = []
    for k, (arm, label) in enumerate(ARMS.items()):
        figures = result["arms"][arm]["minus_warm_start"]
        rows.append(claim(f"L{first + k}", "learning", text.format(label), scope_, unit.format(**fill), figures["n"],
                          [part(figures, f"{label} - warm start")], +1, source,
                          (question.format(label), f"small text policy (not an LM), {digest_scope}, CPU")))
    return rows


def text_policy_alfworld() -> list[dict[str, Any]]:
    """The small text policy's registered studies (``benchmarks/alfworld_text.py``): ALFWorld, households, speed."""
    study, speed_ = load("alfworld_text.json"), load("text_policy_speed.json")
    rows = _minus_warm_start(study, 7, "Real ALFWorld on one CPU: {} from the warm start wins more valid_seen games "
                             "than the warm start", "ALFWorld valid_seen, all {games} games, 50 steps, T = 0.4",
                             "3,553 train games, {share:.1f} % of valid_seen",
                             "training seeds (each: 140 games paired with the warm start's)", "alfworld_text.json",
                             "Does {} from a warm start win real ALFWorld games?", "valid_seen")
    holm_family(list(study["comparisons"].values()))  # Holm over the two
    for k, other in enumerate(("gigpo_std", "grpo")):
        figures = study["comparisons"][f"ecpo - {other}"]
        rows.append(claim(f"E{8 + k}", "comparison", f"Real ALFWorld, text policy: ECPO against {ARMS[other]} in "
                          "valid_seen success", rows[0]["scope"], "training seeds (paired by seed; Holm over 2)",
                          figures["n"], [part(figures, f"ECPO - {ARMS[other]}")], +1, "alfworld_text.json",
                          (f"ECPO vs {ARMS[other]} on real ALFWorld (text policy)?",
                           "small text policy (not an LM), valid_seen, CPU")))
    rows += _minus_warm_start(load("households_text.json"), 10, "Generated households on one CPU: {} from the warm "
                              "start wins more held-out households than the warm start (issue 57's households pilot)",
                              "generated households (ALFWorldGen), {games} held-out households (seeds 100000+), 50 "
                              "steps, T = 0.4", "3,600 training households, {share:.1f} % of the held-out ones",
                              "training seeds (each: {games} households paired with the warm start's)",
                              "households_text.json",
                              "Does {} from a warm start win generated households?", "held-out households")
    rate, iteration = speed_["decisions"]["per_second"], speed_["iteration"]["engines"]
    timing = ", ".join(f"{engine} {figures['median_seconds']:.1f} s" for engine, figures in iteration.items())
    figure = (f"{rate['threads_2']:,.0f} decisions/s (2 threads), {rate['threads_1']:,.0f} (1 thread); a 16 x 8 "
              f"iteration on real games: {timing} (median; load {speed_['load_average_1m']['before']:.1f})")
    rows.append(claim("S12", "speed", "The small text policy's decision rate and its group-RL iteration on real ALFWorld",
                      scope("ALFWorld train split, 16 x 8 episodes, 50 steps", TEXT, "batched act; native and RLlib "
                            "(2 runners, 2 learners) iterations"), "timed passes",
                      len(next(iter(iteration.values()))["iterations"]),
                      [measured(figure, digest=f"{rate['threads_2']:,.0f} decisions/s; iteration {timing}")], 0,
                      "text_policy_speed.json", ("How fast is the small text policy?", "not an LM; ALFWorld, CPU")))
    return rows


REGIME_ARMS = {"ecpo": "ECPO (d_min 7)", "ecpo_d1": "ECPO (d_min 1)", "grpo": "GRPO"}  # the family, each - GiGPO w/std


# A registered study's claims while its runs go on (kept in git as each finishes; no endpoint read before the last).
UNDER_WAY = "registered; runs under way, read once after the last"


def regime_study() -> list[dict[str, Any]]:
    """Issue 71's registered comparison where ECPO's step credit engages (``benchmarks/regime_study.yaml``): each arm
    of the family minus GiGPO w/std in valid_seen success at the final iteration (Holm over the family), the validation
    AUC beside it (its own Holm family; shown, not counted). Until the study's report is committed (it is read once,
    after the last run) each claim stands registered and under way (its runs started from 04a961a), with no figure, its
    source the pilot's seed count."""
    from benchmarks.alfworld_text import testbed_named
    from benchmarks.regime_study import RESULT_JSON, protocol, study_seeds
    from benchmarks.study_keep import manifest_games

    spec = protocol()
    result = load(RESULT_JSON) if (RESULTS / RESULT_JSON).is_file() else None
    planned = len(spec["warm_starts"]) * len(study_seeds(spec))
    games = manifest_games(testbed_named(spec["testbeds"]["study"]))  # the endpoint's games
    scope_ = scope(f"ALFWorld valid_seen, all {games} games, 50 steps, T = 0.4, open command set (invalid commands: "
                   "reward -0.1, canonical <invalid>)", TEXT, f"{len(spec['warm_starts'])} warm starts (expert, open "
                   f"command set) then {spec['iterations']} iterations of group RL ({', '.join(spec['recipe'])})")
    rows = []
    for k, (arm, label) in enumerate(REGIME_ARMS.items()):
        key = f"{arm} - {spec['reference']}"
        parts, n = [], 0
        if result is not None:
            endpoint, auc = result["endpoint"]["comparisons"][key], result["validation_auc"]["comparisons"][key]
            parts, n = [part(endpoint, f"{label} - GiGPO w/std", T_INTERVAL),
                        part(auc, "validation AUC (secondary)", T_INTERVAL, secondary=True)], endpoint["units"]
        rows.append(claim(f"E{10 + k}", "comparison", f"Real ALFWorld with invalid commands (where ECPO's step credit "
                          f"engages), text policy: {label} against GiGPO w/std in valid_seen success after "
                          f"{spec['iterations']} iterations", scope_,
                          f"training runs paired by (warm start, seed), each arm's run against GiGPO w/std's; "
                          f"Holm over {len(spec['family'])}; {planned} planned", n, parts, 0 if arm == "grpo" else +1,
                          RESULT_JSON if result is not None else "regime_pilot_seeds.json",  # (the planned count's)
                          (f"{label} vs GiGPO w/std, open commands?",
                           f"text policy, valid_seen, {spec['iterations']} iterations, CPU"),
                          **({} if result is not None else {"status": UNDER_WAY})))
    return rows


SOURCES: tuple[Callable[[], list[dict[str, Any]]], ...] = (endpoints, seed_comparisons, credit, speed,
                                                         text_policy_alfworld, regime_study)


def all_claims() -> list[dict[str, Any]]:
    return [row for source in SOURCES for row in source()]
