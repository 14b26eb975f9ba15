"""Where each claim of ``docs/claims.md`` comes from: one function per result JSON that reads its figures.

Every claim is a dict: ``id``, ``area`` (learning, comparison, credit, speed), ``claim`` (the question it answers),
``scope`` (env, model, mode, device), ``unit`` and ``n``, ``parts`` (each an estimate with its interval, MDE and
whether it is significant, from the JSON's own fields), ``direction`` (+1: the claim says higher; -1: lower; 0: a
difference either way, or a measurement), ``source``, for the README's digest ``digest`` (a short question and
scope), and where the verdict is not the rule's own, ``status`` (a withdrawn measurement) or ``no_mde`` (why the
design has no MDE). The interval's field names live in ``FIELDS`` only, so a benchmark that renames them changes
one line here. A t-based MDE is recomputed here from the JSON's standard error, degrees of freedom and Holm count
(``benchmarks.stats.detectable``: exact power), not read from the JSON, whose older runs stored the
normal-approximation MDE.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from benchmarks import RESULTS
from benchmarks.stats import (
    ALPHA,
    detectable,
    holm_adjusted,
    holm_miss_text,
    holm_p_text,
    paired_diff,
    paired_values,
    ratio_of_means,
)

# the JSON fields of an estimate with its interval (benchmarks.stats' names), and of the task-clustered one beside it
FIELDS = {"estimate": "diff", "low": "low", "high": "high", "method": "interval", "mde": "mde", "p": "p",
          "clustered": "clustered", "significant": "holm_significant", "shown": "shown", "p_holm": "p_holm"}
T_INTERVAL = "t-interval over seeds"
BINARY_UNNAMED = "McNemar-consistent, conditional"  # a paired-binary interval from before the JSONs named theirs
SMOL = "SmolLM2-135M-Instruct"
CPU = "2-core CPU"
H100 = "one NVIDIA H100"
POOL = "ALFWorld generated Look/Pick households, 4-5 receptacles"
SCORE = "native trainer, scoring the admissible actions, T = 0.4"


def load(name: str) -> Any:
    """A result JSON; one that is cut, empty or not UTF-8 is a ``ValueError`` naming it."""
    try:
        return json.loads((RESULTS / name).read_text())
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{RESULTS / name} cannot be read ({type(error).__name__}): restore it, or rerun its "
                         "benchmark") from None


def part(figures: Mapping[str, Any], label: str = "", method: str | None = None,
         secondary: bool = False, short: str | None = None) -> dict[str, Any]:
    """One estimate of a JSON as the ledger shows it: estimate, interval and its method, MDE, the clustered
    interval where the JSON has one, and whether the JSON's test calls it significant (Holm's decision where the
    JSON made one, else the interval excluding 0, with McNemar's p below 0.05 where it has one). A ``secondary``
    part is shown beside the claim's verdict, not counted in it; ``short`` names it in the README's digest."""
    f = {key: figures.get(name) for key, name in FIELDS.items()}
    identical = figures.get("se") == 0 and figures.get("diff") == 0 and "gained" not in figures
    out = {"label": label, "short": short or label, "estimate": f["estimate"], "low": f["low"], "high": f["high"],
           "method": f["method"] or method or (BINARY_UNNAMED if "gained" in figures else ""),
           "mde": _mde(figures, f["mde"]), "secondary": secondary, "p_holm": f["p_holm"]}
    if identical:  # an interval [0, 0] and an MDE of 0 would read as a measurement; they are one arm twice
        out |= {"estimate": None, "method": "the two arms are identical on every seed: nothing is compared",
                "mde": None}
    if isinstance(f["clustered"], Mapping):
        c = f["clustered"]
        out["by_task"] = {"low": c["low"], "high": c["high"], "clusters": c.get("clusters"), "unit": c.get("unit")}
    excludes = f["low"] is not None and (f["low"] > 0 or f["high"] < 0)
    p_ok = f["p"] is None or (isinstance(f["p"], float) and f["p"] < 0.05)
    decided = f["significant"] if f["significant"] is not None else f["shown"]  # the benchmark's own decision
    out["significant"] = bool(decided) if decided is not None else bool(excludes and p_ok)
    return out


def holm_family(family: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A JSON's Holm family (every comparison its benchmark corrected together), each part given its Holm-adjusted p
    (``p_holm``) where the JSON did not store one: the figure a Holm verdict beside an unadjusted interval rests on.
    A family whose size is not the ``m`` its parts state is not the JSON's family (``ValueError``)."""
    p_values = [p.get("p", float("nan")) for p in family]
    m = sum(math.isfinite(x) for x in p_values)
    stated = {p.get("m") for p in family} - {None}
    if stated and stated != {m}:
        raise ValueError(f"a Holm family of {m} comparisons whose parts state m = {sorted(stated)}")
    for p, adjusted in zip(family, holm_adjusted(p_values)):
        p.setdefault("p_holm", adjusted)
    return family


def _mde(figures: Mapping[str, Any], stored: float | None) -> float | None:
    """The MDE at the JSON's own Holm level by exact power where the JSON gives a t-test's ``se`` and ``df`` or a
    paired table; the JSON's stored MDE otherwise."""
    has_t = all(isinstance(figures.get(k), (int, float)) and math.isfinite(figures[k]) for k in ("se", "df"))
    if "gained" in figures or has_t:
        return detectable(figures, ALPHA / max(1, int(figures.get("m") or 1)))
    return stored


def claim(id_: str, area: str, text: str, scope: dict[str, str], unit: str, n: int, parts: list[dict],
          direction: int, source: str, digest: tuple[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": id_, "area": area, "claim": text, "scope": scope, "unit": unit, "n": n, "parts": parts,
            "direction": direction, "source": f"benchmarks/results/{source}", "digest": digest} | extra


ONE_RUN = "one run: covers validation draws, not run-to-run variance"  # where a JSON does not state its units


def _endpoint(name: str) -> dict[str, Any]:
    return load(name)[0]["paired"]


def endpoints() -> list[dict[str, Any]]:
    one_run = f"paired validation episodes; {load('alfworld_cpu_pool_endpoint.json')[0].get('units', ONE_RUN)}"
    control, pool = _endpoint("alfworld_cpu_control_endpoint.json"), _endpoint("alfworld_cpu_pool_endpoint.json")
    gigpo = _endpoint("alfworld_cpu_pool_gigpo_std_endpoint.json")
    gpu = load("gpu_run.json")["parts"]["learning"]
    scope_cpu = {"env": POOL, "model": SMOL, "mode": SCORE, "device": CPU}
    return [
        claim("L1", "learning", "Positive control: the update learns its own 4 training households (10 iterations)",
              scope_cpu | {"env": "4 ALFWorld households"}, one_run, control["trained"]["episodes"],
              [part(control["trained"], "trained tasks")], +1, "alfworld_cpu_control_endpoint.json",
              ("Positive control: does it learn its own training tasks?", "SmolLM2, 4 ALFWorld tasks, CPU")),
        claim("L2", "learning", "Pool protocol (registered): ECPO learns its 16 households in 16 iterations",
              scope_cpu | {"env": f"{POOL}; a pool of 16"}, one_run, pool["trained"]["episodes"],
              [part(pool["trained"], "the pool (primary)"), part(pool["unseen"], "unseen 48 households", secondary=True)], +1,
              "alfworld_cpu_pool_endpoint.json", ("Does ECPO learn a registered pool of 16 households?", "SmolLM2, ALFWorld pool, CPU")),
        claim("L3", "learning", "Pool protocol: GiGPO w/std learns the same pool", scope_cpu | {"env": f"{POOL}; "
              "a pool of 16"}, one_run, gigpo["trained"]["episodes"],
              [part(gigpo["trained"], "the pool"), part(gigpo["unseen"], "unseen 48 households", secondary=True)], +1,
              "alfworld_cpu_pool_gigpo_std_endpoint.json"),
        claim("L4", "learning", "An LLM learns unseen households on a GPU (alfworld_gpu, 24 ECPO iterations)",
              {"env": f"{POOL}, alfworld_gpu 16 x 8", "model": SMOL, "mode": SCORE, "device": H100}, one_run,
              gpu["validation"]["episodes"], [part(gpu["validation"], "unseen 400 households x 2"),
                                              part(gpu["training_tasks"], "training tasks", secondary=True)], +1, "gpu_run.json",
              ("Does an LLM learn unseen households on a GPU?", "SmolLM2, alfworld_gpu, T = 0.4, one H100")),
    ]


def _llm_comparisons(name: str) -> list[dict[str, Any]]:
    from benchmarks.llm_learning_report import comparisons

    return comparisons(load(name)["results"])


def seed_comparisons() -> list[dict[str, Any]]:
    seeds = "training seeds (paired by seed)"
    corridor = {p["N"]: p for p in _llm_comparisons("llm_learning.json")
                if (p["kind"], p["a"], p["b"]) == ("vs", "ecpo", "gigpo_std")}
    alf = [p for p in _llm_comparisons("llm_learning_alfworld_cpu_pairs.json")
           if (p["kind"], p["a"], p["b"]) == ("vs", "ecpo", "gigpo_std")]
    pipelined = load("pipelined_learning.json")["comparisons"]
    for measure in dict.fromkeys(c["measure"] for c in pipelined):  # a Holm family per measure (m = 2 each)
        holm_family([c for c in pipelined if c["measure"] == measure])
    lag = next(p for p in pipelined if p["comparison"] == "ecpo_lag1 - gigpo_std_lag1"
               and p["measure"].startswith("final exact success"))
    pair_report = load("alfworld_cpu_pool_pair_seed0.json")
    pair = pair_report["paired"]
    pair_units = pair_report.get("units", "one pair of runs (one seed): no interval over seeds")
    rllib = {c["claim"]: c for c in holm_family(load("rllib_llm_learning.json")["comparisons"])}
    corridor_scope = {"env": "4-room LLM corridor (corridor_llm)", "model": SMOL, "device": CPU}
    learned = [p for p in _llm_comparisons("llm_learning.json") if (p["kind"], p["a"]) == ("learned", "ecpo")]
    alf_learned = [p for p in _llm_comparisons("llm_learning_alfworld_cpu_pairs.json")
                   if (p["kind"], p["a"]) == ("learned", "ecpo")]
    lag0 = [p for p in pipelined if p["comparison"] == "ecpo_lag1 - ecpo_lag0"]
    alf_without = _without_selection_seed("llm_learning_alfworld_cpu_pairs.json")
    grpo = [p for p in _llm_comparisons("llm_learning.json") if (p["kind"], p["a"], p["b"]) == ("vs", "grpo", "gigpo_std")]
    return [
        claim("L5", "learning", "ECPO training of an LLM raises late success over the start (corridor)",
              corridor_scope | {"mode": "native trainer, exact success"}, seeds, learned[0]["n"],
              [part(p, f"N = {p['N']}", T_INTERVAL) for p in sorted(learned, key=lambda p: int(p["N"]))], +1,
              "llm_learning.json", ("Does ECPO training of an LLM learn the corridor?", "SmolLM2, LLM corridor, CPU")),
        claim("L6", "learning", "ECPO raises success on unseen small ALFWorld households (alfworld_cpu, 6 iterations; "
              f"the recipe was chosen on seed {SELECTION_SEED})",
              {"env": POOL, "model": SMOL, "mode": SCORE, "device": CPU}, seeds, alf_learned[0]["n"],
              [part(p, f"N = {p['N']}", T_INTERVAL) for p in alf_learned]
              + [part(p, f"N = {p['N']}, without seed {SELECTION_SEED} (the selection seed)", T_INTERVAL, secondary=True)
                 for p in alf_without if (p["kind"], p["a"]) == ("learned", "ecpo")], +1,
              "llm_learning_alfworld_cpu_pairs.json"),
        claim("E6", "comparison", "Pipelined rollouts (lag 1) against lag 0 (ECPO): a difference in final exact success? "
              "(no equivalence margin was registered, so a null reads 'no difference shown', not 'as well as')",
              corridor_scope | {"mode": "RLlib, 2 runners, lag 1 vs lag 0"}, seeds, lag0[0]["n"],
              [part(lag0[0], "final exact success", T_INTERVAL),
               part(_seed_clustered_validation("ecpo_lag1", "ecpo_lag0"), "final validation episodes, clustered by "
                    "seed (the seed's success rate as the unit)", T_INTERVAL, secondary=True)],
              0, "pipelined_learning.json"),
        claim("E1", "comparison", "ECPO beats GiGPO w/std in late success (corridor, N = 4 and 8)",
              corridor_scope | {"mode": "native trainer, exact success"}, seeds, corridor[max(corridor)]["n"],
              [part(p, f"N = {n}", T_INTERVAL) for n, p in sorted(corridor.items())], +1, "llm_learning.json",
              ("Does ECPO beat GiGPO w/std when training an LLM?", "SmolLM2, LLM corridor, CPU")),
        claim("E7", "comparison", "GRPO against GiGPO w/std in late success (corridor): a difference either way? "
              "(in the LLM study's Holm family; 3 seeds)",
              corridor_scope | {"mode": "native trainer, exact success"}, seeds, grpo[0]["n"],
              [part(p, f"N = {p['N']}", T_INTERVAL) for p in sorted(grpo, key=lambda p: int(p["N"]))], 0,
              "llm_learning.json", ("Does GRPO differ from GiGPO w/std when training an LLM?", "SmolLM2, LLM corridor, CPU")),
        claim("E2", "comparison", "ECPO beats GiGPO w/std in final exact success, 10 seeds (pipelined RLlib, lag 1)",
              corridor_scope | {"mode": "RLlib, 2 runners, pipelined (lag 1)"}, seeds, lag["n"],
              [part(lag, "final exact success", T_INTERVAL)], +1, "pipelined_learning.json",
              ("ECPO vs GiGPO w/std over 10 seeds?", "SmolLM2, LLM corridor, RLlib lag 1, CPU")),
        claim("E3", "comparison", "ECPO beats GiGPO w/std on small ALFWorld households (alfworld_cpu; the recipe was "
              f"chosen on seed {SELECTION_SEED})",
              {"env": POOL, "model": SMOL, "mode": SCORE, "device": CPU}, seeds, alf[0]["n"],
              [part(p, f"N = {p['N']}", T_INTERVAL) for p in alf]
              + [part(p, f"N = {p['N']}, without seed {SELECTION_SEED} (the selection seed)", T_INTERVAL, secondary=True)
                 for p in alf_without if (p["kind"], p["a"], p["b"]) == ("vs", "ecpo", "gigpo_std")], +1,
              "llm_learning_alfworld_cpu_pairs.json"),
        claim("E4", "comparison", "ECPO beats GiGPO w/std on the pool: one seed pair (conditional on that pair)",
              {"env": f"{POOL}; a pool of 16", "model": SMOL, "mode": SCORE, "device": CPU},
              f"paired validation episodes; {pair_units}",
              pair["trained"]["episodes"], [part(pair["trained"], "the pool") | {"mde": None},
                                            part(pair["unseen"], "unseen", secondary=True) | {"mde": None}], +1,
              "alfworld_cpu_pool_pair_seed0.json", ("ECPO vs GiGPO w/std on the ALFWorld pool?", "SmolLM2, ALFWorld pool, CPU"),
              no_mde="no MDE: one seed pair, and the seed is the unit of a comparison of methods"),
        claim("E5", "comparison", "RLlib (2 runners) against the native trainer: a difference in exact-success gain? "
              "(no equivalence margin was registered, so a null reads 'no difference shown', not 'learns like')",
              corridor_scope | {"mode": "RLlib 2 runners vs native"}, seeds, rllib["rllib gain - native gain"]["n"],
              [part(rllib["rllib exact-success gain"], "RLlib gain", T_INTERVAL, secondary=True),
               part(rllib["native exact-success gain"], "native gain", T_INTERVAL, secondary=True),
               part(rllib["rllib gain - native gain"], "RLlib - native", T_INTERVAL)], 0,
              "rllib_llm_learning.json", ("RLlib (2 runners) against native: a difference in gain?", "SmolLM2, LLM corridor, CPU")),
    ]


SELECTION_SEED = 0  # alfworld_cpu's recipe was chosen on this seed's own validation (llm_learning_report.SELECTED_ON)


def _without_selection_seed(name: str) -> list[dict[str, Any]]:
    from benchmarks.llm_learning_report import comparisons, without_seed

    return comparisons(without_seed(load(name)["results"], SELECTION_SEED))


def _seed_clustered_validation(a: str, b: str) -> dict[str, Any]:
    """``a - b`` on the final validation, clustered by seed: every seed validates the same number of episodes, so
    the cluster-robust interval of the pooled difference is the t-interval over the seeds' success rates."""
    runs = load("pipelined_learning.json")["runs"]
    by_arm = {arm: {r["seed"]: r["val_success_after"] for r in runs if r["arm"] == arm} for arm in (a, b)}
    _, diffs = paired_values(by_arm[a], by_arm[b], label=f"{a} - {b}")
    return paired_diff(list(diffs))


def _grpo_parts(runs: list[dict[str, Any]], env: str, a: str, b: str, label: str) -> list[dict[str, Any]]:
    cells = {}
    for r in runs:
        if r["env_name"] == env and r["method"] in (a, b):
            cells.setdefault((r["method"], r["group_size"]), {})[r["seed"]] = r["final_success"]
    return [{"label": label, "N": n, **paired_diff(list(paired_values(cells[(a, n)], cells[(b, n)])[1]))}
            for n in sorted({n for _, n in cells})]


def grpo_rows(payload: Mapping[str, Any], envs: Mapping[str, tuple[str, str, str]], first: int) -> list[dict[str, Any]]:
    """The credit study's GRPO rows, which its registered claims left out: GRPO against GiGPO w/std (a difference
    either way) and ECPO against GRPO (ECPO claims higher), final success paired by seed, Holm-corrected as one
    family of their own (added after the study: not part of its registered family)."""
    from benchmarks.stats import apply_holm

    runs, rows = payload["runs"], []
    questions = (("grpo", "gigpo_std", "final success, GRPO - GiGPO w/std", 0,
                  "GRPO against GiGPO w/std: a difference in final success? (added after the study)"),
                 ("ecpo", "grpo", "final success, ECPO - GRPO", +1, "ECPO beats GRPO in final success (added after the study)"))
    family = {(env, q): _grpo_parts(runs, env, q[0], q[1], q[2]) for env in envs for q in questions}
    apply_holm([p for parts in family.values() for p in parts], [q[3] or 1 for (_, q), parts in family.items() for _ in parts])
    digests: dict = {}
    for (env, (a, b, label, direction, text)), parts in family.items():
        env_text, model, mode = envs[env]
        rows.append(claim(f"K{first + len(rows)}", "credit", text, {"env": env_text, "model": model, "mode": mode,
                                                                    "device": CPU},
                          "training seeds (paired by seed)", parts[0]["n"],
                          [part(p, f"N = {p['N']}", T_INTERVAL) for p in parts], direction, "credit_study.json",
                          digests.get((a, env))))
    return rows


def credit() -> list[dict[str, Any]]:
    payload = load("credit_study.json")
    study = payload["summary"]
    holm_family([p for c in study["claims"] for p in c["parts"]] + (study.get("readings") or {}).get("parts", []))
    same = study["same_as_grpo"]["webshop"]
    envs = {"diagnostic": ("diagnostic corridor (tabular)", "tabular policy", "native trainer"),
            "webshop": ((f"WebShop (tabular, d_min = 7 on 8-step episodes: rho ~ 0; ECPO = GRPO in {same['equal']}/"
                         f"{same['total']} cells)"), "tabular policy", "native trainer")}
    digests = {("C3", "diagnostic"): ("Tabular: ECPO vs GiGPO w/std in final success?",
                                      "diagnostic corridor, CPU"),
               ("C6", "diagnostic"): ("Tabular: does ECPO lower the advantage range?", "diagnostic corridor, CPU"),
               ("C1", "diagnostic"): ("Tabular: do divergent anchors grow more frequent?",
                                      "diagnostic corridor, CPU")}
    rows = []
    for c in study["claims"]:  # the credit study's claims C1-C7, each on each environment
        env, model, mode = envs[c["env"]]
        welch = all(str(p["a"]).startswith("N=") for p in c["parts"])  # C7: runs at two N share no training
        unit, method = (("training runs (independent: N against N, Welch)", "Welch t-interval") if welch else
                        ("training seeds (paired by seed)", T_INTERVAL))
        rows.append(claim(f"K{len(rows) + 1}", "credit", f"{c['id']}: {c['claim']}",
                          {"env": env, "model": model, "mode": mode, "device": CPU}, unit,
                          c["parts"][0]["n"], [part(p, f"{p['label']}, N = {p['N']}", method, short=f"N = {p['N']}") for p in c["parts"]],
                          c["parts"][0]["direction"], "credit_study.json", digests.get((c["id"], c["env"]))))
    rows += grpo_rows(payload, envs, len(rows) + 1)
    registered = load("credit_counterfactual_claim.json")
    reg = registered["registration"]
    explore = registered["exploratory"]
    seeds = f"{min(explore['seeds'])}-{max(explore['seeds'])}"
    parts = [{"label": f"{e}, exploratory: seeds {seeds}", "estimate": None, "low": None, "high": None,
              "method": f"{explore[e]['cells_below']}/{explore[e]['cells']} below 0, p {explore[e]['p']:.3g}",
              "mde": None, "significant": False, "secondary": True}
             for e in reg["estimators"]]
    rows.append(claim(f"K{len(rows) + 1}", "credit", "B1: one ECPO update raises log pi(rare|s) at lucky singletons less than "
                      "GiGPO w/std's (registered claim-level test)",
                      {"env": "corridors (tabular, SmolLM2)", "model": f"tabular, {SMOL}",
                       "mode": "one update from the same checkpoint", "device": CPU},
                      f"training runs (arm x checkpoint seed; {3 * len(reg['checkpoint_seeds'])} planned)", 0, parts,
                      -1, "credit_counterfactual_claim.json",
                      ("Does an ECPO update push lucky singletons less (App. C)?", "corridors, CPU")))
    return rows


def real_alfworld_text(agents: Mapping[str, list[dict[str, Any]]]) -> str:
    """S10's figures: each agent's wins, the warm start minus the untrained model on the same games (paired by
    game: one seed, the same episode draws; Tango's interval, McNemar's p; where the untrained model won
    none, the gain the design detects with 80 % power: ``stats.mde_from_none_won``), the median seconds
    an untrained episode took (its range and the load beside them in the JSON)."""
    from benchmarks.stats import mde_from_none_won, paired_outcomes

    untrained = next(games for name, games in agents.items() if "untrained" in name)
    warm = next(((name, games) for name, games in agents.items() if "warm start" in name), None)
    seconds = sorted(g["seconds"] for g in untrained)  # the median untrained episode; the range by load in the JSON
    text = f"untrained {sum(g['success'] for g in untrained)}/{len(untrained)}"
    if warm is not None:
        games = warm[1]
        won = {g["task_id"]: g["success"] for g in games}
        part = paired_outcomes({g["task_id"]: g["success"] for g in untrained}, won, label="S10")
        detects = "" if any(g["success"] for g in untrained) else f"; detects {mde_from_none_won(len(won))[1]:.2f}"
        text += (f", warm start {sum(won.values())}/{len(won)} ({part['diff']:+.2f} [{part['low']:+.2f}, "
                 f"{part['high']:+.2f}], p {part['p']:.2f}{detects})")
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
    lags = [pipelined["lags"][k]["seconds_per_iteration"] for k in ("0", "1")]
    short = {"S9": f"{ratio_of_means(*lags)['ratio']:.2f}x [{ratio_of_means(*lags)['low']:.2f}, "
                   f"{ratio_of_means(*lags)['high']:.2f}] (ratio of means)"}
    rows = [
        ("S1", "Credit's cost: ECPO's time over GiGPO w/std's", {"env": f"{overhead['batch']['rows']:,}-row batch",
         "model": "-", "mode": "numpy, 1 thread", "device": CPU}, f"median of {overhead['reps']} repetitions",
         overhead["reps"], f"{overhead['ratios']['ecpo_over_gigpo']:.2f}x ({overhead['median_ms']['ecpo']:.1f} ms)",
         "credit_overhead.json", ("What does credit cost?", "5,452-row batch, numpy, CPU")),
        ("S2", "The native ALFWorld engine: steps against TextWorld's, and identical play",
         {"env": "ALFWorld (3,693 games)", "model": "-", "mode": "env step", "device": CPU},
         f"{differential['games_checked']:,} games compared step by step", differential["games_checked"],
         (f"{engines['ratios']['single_steps_per_s']:.0f}x TextWorld's steps/s; {differential['mismatch_count']} "
         f"mismatches in {differential['steps_compared']:,} steps"), "alfworld_engines.json",
         ("Is the native ALFWorld engine faithful and fast?", "ALFWorld, CPU")),
        ("S3", "The paper-shaped iteration on one GPU", {"env": "ALFWorldGen 16 x 8, 512-token replies, 2 steps",
         "model": paper["model"], "mode": "full FT, bf16", "device": H100}, "one iteration", 1,
         (f"{paper['time/iteration']:.1f} s (generation {paper['time/generation']:.1f} s at "
         f"{paper['generation_tokens_per_s']:,.0f} tok/s), peak {paper['peak_memory_gib']:.1f} GiB"),
         "gpu_run.json", ("What does the paper-shaped iteration cost?", "Qwen2.5-1.5B shape, one H100")),
        ("S4", "SmolLM2 learning iteration on one GPU (alfworld_gpu)", {"env": f"{POOL}, 16 x 8", "model": SMOL,
         "mode": SCORE, "device": H100}, "iterations (mean)", learning["iterations_done"],
         (f"{learning['rates']['time/iteration']:.1f} s an iteration, {learning['rates']['decisions_per_s']:.0f} "
         "decisions/s"), "gpu_run.json"),
        ("S5", "Memory of Qwen2.5-7B full fine-tuning under FSDP2 x 8 (computed, not measured)",
         {"env": "-", "model": "Qwen2.5-7B", "mode": "FSDP2 x 8, checkpointing", "device": "computed"},
         "one computation", 1, f"{_memory(memory, 'Qwen2.5-7B', 'FSDP2'):.1f} GB per GPU", "memory.json",
         ("What fits on a GPU?", "Qwen2.5-7B, FSDP2 x 8, computed")),
        ("S6", "A decoding step of the transformers sampler on one GPU, bf16 weights against float32",
         {"env": f"{generation['shape']['rows']} rows, {generation['shape']['prompt']}-token prompts",
          "model": "Qwen2.5-1.5B architecture", "mode": "transformers generate", "device": H100},
         f"{generation['shape']['tokens']} decoding steps", generation["shape"]["tokens"],
         "; ".join(f"{name}: {v['ms_per_step']:.1f} ms a step" for name, v in generation["variants"].items()),
         "generation_profile.json"),
        ("S7", "RLlib README example: the driver's peak memory, before and after issue 36's change",
         {"env": "LLM corridor", "model": SMOL, "mode": "RLlib, 2 env runners", "device": CPU}, "one run each", 2,
         f"driver peak RSS {rllib_before['driver_peak_rss_mb']:,.0f} MB -> {rllib_after['driver_peak_rss_mb']:,.0f} MB",
         "rllib_memory_after.json"),
        ("S8", "A WebShop step at 1,000 products", {"env": "WebShop, 1,000 products", "model": "-", "mode": "env step",
         "device": CPU}, "steps timed", webshop["step"]["count"],
         (f"mean {webshop['step']['mean_ms']:.2f} ms, median {webshop['step']['median_ms']:.2f} ms, p90 "
          f"{webshop['step']['p90_ms']:.2f} ms"),
         "env_throughput_webshop.json"),
        ("S9", "Pipelined rollouts (lag 1) against lag 0: wall time per iteration, SmolLM2 on the LLM corridor",
         {"env": "LLM corridor", "model": SMOL, "mode": "RLlib, 2 env runners, one local learner", "device": CPU},
         "timed iterations per lag", len(pipelined["lags"]["1"]["seconds_per_iteration"]), pipelined_text(pipelined),
         "pipelined_rollouts.json", ("Do pipelined rollouts speed an iteration up?", "SmolLM2, LLM corridor, RLlib, CPU")),
        ("S10", "Real ALFWorld games on the CPU: the untrained model, a CPU-sized warm start, episode time",
         {"env": f"ALFWorld valid_seen, {len(untrained) // 6} games per task type, 50 steps", "model": SMOL,
          "mode": SCORE, "device": CPU}, "games (one episode each)", len(untrained),
         real_alfworld_text(real), "paper_alfworld_cpu.json",
         ("SmolLM2 on real ALFWorld?", "valid_seen, CPU")),
        ("S11", "Peak resident memory of `ecpo sft` and the scoring update on real ALFWorld steps, 5-80 candidates",
         {"env": "ALFWorld valid_seen steps, 2 rows", "model": SMOL, "mode": SCORE + ", bounded forwards",
          "device": CPU}, "candidate counts", len(memory_k),
         (f"at most {peaks['sft after']:.2f} GB (sft) and {peaks['update after']:.2f} GB (update); before the "
          f"bound {before_80['sft before']:.2f} and {before_80['update before']:.2f} GB at 80 candidates"),
         "candidate_memory.json"),
    ]
    return [claim(id_, "speed", text, scope, unit, n, [{"label": "", "estimate": None, "low": None, "high": None,
                                                        "method": figure, "mde": None, "significant": False,
                                                        "secondary": False,
                                                        "digest": short.get(id_, figure)}],
                  0, source, digest, **({"status": "withdrawn"} if id_ in WITHDRAWN else {}))
            for id_, text, scope, unit, n, figure, source, *rest in rows for digest in (rest[0] if rest else None,)]


WITHDRAWN = {"S9"}  # a measurement its own data do not support


def pipelined_text(case: Mapping[str, Any]) -> str:
    """S9, withdrawn: the 1.25x was a ratio of medians of 4 iterations a lag; the ratio of means with Fieller's
    interval and the Mann-Whitney p from the same iterations say what those data support. A re-measurement
    needs at least 20 interleaved iterations a lag (about 25 minutes of a 2-core machine); it was not run."""
    lag0, lag1 = (case["lags"][k]["seconds_per_iteration"] for k in ("0", "1"))
    r = ratio_of_means(lag0, lag1)
    return (f"withdrawn: the 1.25x was a ratio of medians of {len(lag0)} iterations a lag; their ratio of means "
            f"(lag 0 over lag 1) is {r['ratio']:.2f} [{r['low']:.2f}, {r['high']:.2f}] (Fieller), Mann-Whitney p "
            f"{r['p']:.2f}; not re-measured (needs >= 20 interleaved iterations a lag)")


def estimator_table() -> dict[str, Any]:
    """Issue 57's comparison as the ledger shows it: one row per estimator, one column per testbed of the
    registered protocol (``benchmarks/estimator_comparison.yaml``), each cell the arm minus GiGPO w/std with its
    interval and verdict from ``estimator_comparison.json``, or why the cell has none."""
    from benchmarks.estimator_comparison import NOT_RUN, RAW_RUNS, RESULT_JSON, load_protocol, machines_text

    protocol = load_protocol()
    result = json.loads(RESULT_JSON.read_text()) if RESULT_JSON.is_file() else {}
    table = result.get("table", {})
    for testbed in {bed for cells in table.values() for bed in cells}:  # each testbed's 8 comparisons: one family
        holm_family([cells[testbed] for cells in table.values() if testbed in cells and not cells[testbed].get("reference")])
    testbeds = [t["name"] for t in protocol["testbeds"]]
    status = {t["name"]: t.get("status", NOT_RUN) for t in protocol["testbeds"]}
    if not table and RAW_RUNS.is_file():  # runs under way or stopped: how far, and no verdict before the last seed
        done: dict[str, int] = {}
        for line in RAW_RUNS.read_text().splitlines():
            run = json.loads(line)
            done[run["env_name"]] = done.get(run["env_name"], 0) + 1
        total = int(protocol["seeds"]) * len(protocol["arms"])
        status |= {name: f"incomplete: {count} of {total} runs, no verdict before the registered seed count"
                   for name, count in done.items()}
    rows = []
    for arm in protocol["arms"]:
        cells = []
        for testbed in testbeds:
            part = table.get(arm, {}).get(testbed)
            if part is None:
                cells.append(status[testbed])
            elif part.get("reference"):
                cells.append(f"reference (mean {part['mean']:.3f})")
            else:
                # the interval is unadjusted: beside one that excludes 0, the Holm-adjusted p the verdict rests on
                beside = [holm_miss_text(part) or holm_p_text(part)]
                beside += [f"MDE {part['mde']:.3f}"] if not part["holm_significant"] and part.get("mde") else []
                beside = "; ".join(b for b in beside if b)
                cells.append(f"{part['diff']:+.3f} [{part['low']:+.3f}, {part['high']:+.3f}]: {part['verdict']}"
                             + (f" ({beside})" if beside else ""))
        rows.append((arm, cells))
    seeds = {t["name"]: t.get("seeds", protocol.get("seeds")) for t in protocol["testbeds"] if "status" not in t}
    headers = [f"{name} ({ESTIMATOR_SCOPE[name]})" if name in ESTIMATOR_SCOPE else name for name in testbeds]
    return {"testbeds": testbeds, "headers": headers, "rows": rows, "seeds": seeds,
            "machines": machines_text(result.get("runs", []), testbeds), "source": RESULT_JSON.name,
            "warm_starts": warm_start_text(table)}


def warm_start_text(table: Mapping[str, Any]) -> str:
    """Why a households verdict holds for one warm start: the households pilot's warm start (``households_text.json``)
    and the study's, made by one command on two CPUs, order ECPO and GRPO the other way round (the pilot's paired
    ECPO - GRPO against the difference of the study's arm means: descriptive, the pilot was not a comparison).
    Empty before the households column is read."""
    study = {arm: cells.get("households", {}).get("mean") for arm, cells in table.items() if arm in ("ecpo", "grpo")}
    if None in study.values() or len(study) < 2:
        return ""
    pilot = load("households_text.json")
    warm, diff = pilot["warm_start"]["by_type"], pilot["comparisons"]["ecpo - grpo"]["diff"]
    return (f"A verdict of alfworld_text or households holds for the one warm start its arms shared and those games: "
            f"on households the pilot's warm start ({round(warm['All'] * warm['games'])} of {warm['games']} won; "
            f"`households_text.json`) and the study's, made by one command on two CPUs, order ECPO and GRPO the "
            f"other way round (ECPO - GRPO {diff:+.3f} in the pilot, {study['ecpo'] - study['grpo']:+.3f} between "
            "the study's arm means; descriptive: the pilot was not a comparison), so another warm start may order "
            "the arms otherwise.")


# What a verdict of a testbed of the estimator comparison covers where the protocol fixes more than the env: every
# arm of the text-policy columns starts from one shared warm start and is judged on one fixed set of games
ESTIMATOR_SCOPE = {"alfworld_text": "one warm start, the 140 valid_seen games",
                   "households": "one warm start, the 120 held-out households"}


def _memory(memory: Mapping[str, Any], model: str, setting: str) -> float:
    return next(c["total_gb"] for c in memory["computed"] if c["model"] == model and c["setting"].startswith(setting))


TEXT = "small text policy (policies/text.py), not a language model"


def text_policy_alfworld() -> list[dict[str, Any]]:
    """The real-ALFWorld study of the small text policy (``benchmarks/alfworld_text.py``, registered before its runs):
    each arm minus the shared warm start on all 140 valid_seen games (the seed as the unit: the mean of the per-seed
    paired differences), ECPO against GiGPO w/std and GRPO (paired by seed, Holm over the two), and the policy's
    decision rate and iteration time; and the same schedule's pilot on generated households
    (``--testbed households``, ``households_text.json``): each arm minus its warm start on 120 held-out households."""
    study, speed_ = load("alfworld_text.json"), load("text_policy_speed.json")
    warm = study["warm_start"]["by_type"]
    scope = {"env": f"ALFWorld valid_seen, all {warm['games']} games, 50 steps, T = 0.4", "model": TEXT,
             "mode": f"warm start (expert, 3,553 train games, {100 * warm['All']:.1f} % of valid_seen) then "
                     f"{study['protocol']['iterations']} iterations of group RL", "device": CPU}
    names = {"ecpo": "ECPO", "gigpo_std": "GiGPO w/std", "grpo": "GRPO"}
    rows = []
    for k, (arm, label) in enumerate(names.items()):
        figures = study["arms"][arm]["minus_warm_start"]
        rows.append(claim(f"L{7 + k}", "learning", f"Real ALFWorld on one CPU: {label} from the warm start wins more "
                          "valid_seen games than the warm start", scope, "training seeds (each: 140 games paired "
                          "with the warm start's)", figures["n"], [part(figures, f"{label} - warm start")], +1,
                          "alfworld_text.json", (f"Does {label} from a warm start win real ALFWorld games?",
                                                 "small text policy (not an LM), valid_seen, CPU")))
    holm_family(list(study["comparisons"].values()))  # Holm over the two
    for k, other in enumerate(("gigpo_std", "grpo")):
        figures = study["comparisons"].get(f"ecpo - {other}", {"diff": float("nan")})
        rows.append(claim(f"E{8 + k}", "comparison", f"Real ALFWorld, text policy: ECPO against {names[other]} in "
                          "valid_seen success", scope, "training seeds (paired by seed; Holm over 2)",
                          int(figures.get("n") or 0), [part(figures, f"ECPO - {names[other]}")], +1,
                          "alfworld_text.json", (f"ECPO vs {names[other]} on real ALFWorld (text policy)?",
                                                 "small text policy (not an LM), valid_seen, CPU")))
    households = load("households_text.json")
    warm = households["warm_start"]["by_type"]
    scope = {"env": f"generated households (ALFWorldGen), {warm['games']} held-out households (seeds 100000+), 50 "
                    "steps, T = 0.4", "model": TEXT,
             "mode": f"warm start (expert, 3,600 training households, {100 * warm['All']:.1f} % of the held-out ones) "
                     f"then {households['protocol']['iterations']} iterations of group RL", "device": CPU}
    for k, (arm, label) in enumerate(names.items()):
        figures = households["arms"][arm]["minus_warm_start"]
        rows.append(claim(f"L{10 + k}", "learning", f"Generated households on one CPU: {label} from the warm start "
                          "wins more held-out households than the warm start (issue 57's households pilot)", scope,
                          f"training seeds (each: {warm['games']} households paired with the warm start's)",
                          figures["n"], [part(figures, f"{label} - warm start")], +1, "households_text.json",
                          (f"Does {label} from a warm start win generated households?",
                           "small text policy (not an LM), held-out households, CPU")))
    rate = speed_["decisions"]["per_second"]
    iteration = speed_["iteration"]["engines"]
    timing = ", ".join(f"{engine} {figures['median_seconds']:.1f} s" for engine, figures in iteration.items())
    figure = (f"{rate['threads_2']:,.0f} decisions/s (2 threads), {rate['threads_1']:,.0f} (1 thread); a 16 x 8 "
              f"iteration on real games: {timing} (median; load {speed_['load_average_1m']['before']:.1f})")
    rows.append(claim("S12", "speed", "The small text policy's decision rate and its group-RL iteration on real ALFWorld",
                      {"env": "ALFWorld train split, 16 x 8 episodes, 50 steps", "model": TEXT, "mode": "batched act; "
                       "native and RLlib (2 runners, 2 learners) iterations", "device": CPU}, "timed passes",
                      len(next(iter(iteration.values()))["iterations"]),
                      [{"label": "", "estimate": None, "low": None, "high": None, "method": figure, "mde": None,
                        "significant": False, "secondary": False,
                        "digest": f"{rate['threads_2']:,.0f} decisions/s; iteration {timing}"}], 0,
                      "text_policy_speed.json", ("How fast is the small text policy?", "not an LM; ALFWorld, CPU")))
    return rows


SOURCES: tuple[Callable[[], list[dict[str, Any]]], ...] = (endpoints, seed_comparisons, credit, speed,
                                                         text_policy_alfworld)


def all_claims() -> list[dict[str, Any]]:
    rows = [row for source in SOURCES for row in source()]
    for row in rows:
        for p in row["parts"]:
            for key in ("estimate", "low", "high", "mde"):
                if isinstance(p.get(key), float) and not math.isfinite(p[key]):
                    p[key] = None
    return rows
