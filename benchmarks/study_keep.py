"""A study longer than a session keeps what it has finished in a folder committed to git (``--keep``; why, and what
the committed studies kept: docs/cpu_training.md, "A study longer than a session").

For every policy whose evaluation covers every game of the endpoint's manifest, the kept folder holds its episode log,
its training run's curve and config (gzipped: 189 jobs would add some 14 MB to a checkout that every device command
copies) and the CPU it ran on; and, once, each warm start's model. ``restore_kept`` puts them back into a run folder
(the episode logs as the leaderboard writes them), where the schedule skips every job whose evaluation is complete:
the one rule for "finished". Checkpoints are not kept. Layout, for a testbed ``bed``::

    SHA256SUMS                  the sha256 of every other kept file (``sha256sum -c`` reads it)
    <warm folder>/sft.json, text_policy.json, text_policy.safetensors   (each of ``bed.warm_folders``)
    <bed.folder>/<policy>/<manifest>.jsonl.gz, machine.json
    runs/<policy>/metrics.jsonl.gz, config.yaml.gz, validation.jsonl.gz (every validation episode's outcome)

    policies/<policy>/text_policy.delta.safetensors, text_policy.json, checksums.sha256

The final policies a testbed keeps (``bed.kept_policy_warm(name)``: a job's warm-start folder, or ``None``) are
float16 text-policy folders, each kept as its difference from its warm start (``ecpo_train/files/weights_delta.py``:
some 0.5 MB of its 2.6) with the folder's own ``checksums.sha256``; ``restore_kept`` rebuilds ``runs/<policy>/policy``
and refuses one whose rebuilt bytes differ from those checksums. ``ecpo leaderboard --agent checkpoint --checkpoint
runs/<policy>/policy`` evaluates it on any split. Rounded to float16, its choices can differ from the run's float32
weights (which played the endpoint) in rare near-ties.

A study whose runs play no endpoint keeps only each finished run's curve and config, ``runs/<run>/...gz`` as above
(``keep_runs``; ``restore_runs`` puts them back).

Kept results are checked before they are used, each refusal one line naming the file: ``keep`` records each file's
sha256 as it writes it, and ``restore`` (and ``keep``, before adding) refuses a file that differs from it, is not
listed or is gone; a kept ``.gz`` unpacks to at most ``MAX_UNPACKED`` bytes; a restored log must hold every game.
Nothing is read or written through a link on either side (``ecpo_train/files/atomic.refuse_links``).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
import zlib
from pathlib import Path
from typing import Any, Protocol

from ecpo_train.files.atomic import no_follow, refuse_links, write_bytes

WARM_FILES = ("sft.json", "text_policy.json", "text_policy.safetensors")
RUN_FILES = ("metrics.jsonl", "config.yaml", "validation.jsonl")  # kept gzipped (the last where the run wrote it)
POLICY_FILES = ("text_policy.json", "checksums.sha256")  # a final policy's folder: these as they are, and
DELTA = "text_policy.delta.safetensors"  # its weights (text_policy.safetensors) as their difference from the warm start
MACHINE = "machine.json"
SUMS = "SHA256SUMS"
MAX_UNPACKED = 64 << 20  # bytes a kept .gz may unpack to (an episode log of 140 games is some 100 KB)


class Played(Protocol):
    folder: str  # the run folder's subfolder of the endpoint's episode logs
    manifest: str  # the endpoint's leaderboard manifest
    warm_folders: tuple[str, ...]  # the warm starts' folders

    def kept_policy_warm(self, name: str) -> str | None: ...  # the warm folder of a job whose final policy is kept


def manifest_games(bed: Played) -> int:
    return _games_in(bed.manifest)


@functools.cache
def _games_in(manifest: str) -> int:
    from ecpo_train.evaluation.manifests import load_manifest

    return sum(len(group.task_ids or ()) for group in load_manifest(manifest).groups)


def _job(root: Path, name: str, bed: Played) -> Path:
    """The folder of ``name``'s evaluation under ``root``: its episode log and, where kept, its machine."""
    from ecpo_train.evaluation.runner import safe_name

    return root / bed.folder / safe_name(name)


def _log(root: Path, name: str, bed: Played, kept: bool) -> Path:
    from ecpo_train.evaluation.runner import safe_name

    return _job(root, name, bed) / f"{safe_name(bed.manifest)}.jsonl{'.gz' if kept else ''}"


def evaluation_complete(root: Path, name: str, bed: Played, kept: bool = False) -> bool:
    """Whether ``name``'s episode log under the run folder ``root`` has a complete record (seed 0) for every game of
    the endpoint's manifest; with ``kept``, whether the kept folder ``root`` holds it (a kept log is written whole,
    from a complete one, and last: its presence is the mark)."""
    from ecpo_train.evaluation.results import load_records

    log = _log(root, name, bed, kept)
    if kept:
        return log.is_file()
    games = {(r["group"], r["task_id"]) for r in load_records(log, repair=False) if int(r["seed"]) == 0}
    return len(games) == manifest_games(bed)


def machine() -> dict[str, str]:
    """The CPU a kept job ran on: float results differ between CPUs (a study's warm start, made again on another
    machine from the same command and seed, won 29 of 120 households where the pilot's had won 45), so a job's record
    names it."""
    import torch

    from benchmarks.timing import cpu_model

    return {"cpu": cpu_model(), "cores": str(os.cpu_count()),
            "torch": torch.__version__, "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}


def _read(source: Path, root: Path) -> bytes:
    """``source``'s bytes, never through a link below ``root``."""
    refuse_links(source, below=root)
    with open(source, "rb", opener=no_follow) as handle:
        return handle.read()


def _write(target: Path, data: bytes, root: Path) -> None:
    """``target`` (under ``root``) replaced whole by ``data``; a link there, or a linked folder below ``root``, is
    refused, never written through."""
    refuse_links(target, below=root)
    target.parent.mkdir(parents=True, exist_ok=True)
    refuse_links(target, below=root)
    write_bytes(target, data, below=root)


def _put(data: bytes, target: Path, keep: Path, sums: dict[str, str] | None) -> None:
    """``data`` kept as ``target`` (under ``keep``), its sha256 recorded in ``sums`` (where given)."""
    _write(target, data, keep)
    if sums is not None:
        sums[target.relative_to(keep).as_posix()] = hashlib.sha256(data).hexdigest()


def _gunzip(source: Path, keep: Path) -> bytes:
    """A kept ``.gz`` unpacked, at most ``MAX_UNPACKED`` bytes; a damaged one is a ``ValueError``."""
    packed = _read(source, keep)
    try:
        unpacker = zlib.decompressobj(wbits=31)
        data = unpacker.decompress(packed, MAX_UNPACKED + 1)
        if len(data) > MAX_UNPACKED or unpacker.unconsumed_tail:
            raise ValueError(f"{source} unpacks to more than {MAX_UNPACKED >> 20} MB, more than any kept log: "
                             "it is not what keep wrote")
        if not unpacker.eof:
            raise EOFError("it ends before its gzip stream does")
    except (zlib.error, EOFError) as err:
        raise ValueError(f"{source} is damaged ({str(err)[:80]}): check it out of git again") from None
    return data


def _games(data: bytes, bed: Played) -> int:
    """How many games of ``bed``'s manifest an episode log's bytes hold a seed-0 record of."""
    from ecpo_train.evaluation.results import record_key

    games = set()
    for line in data.splitlines():
        try:
            record = json.loads(line)
            manifest, group, task, seed = record_key(record)
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        if seed == 0 and manifest == bed.manifest:
            games.add((group, task))
    return len(games)


def _write_sums(keep: Path, sums: dict[str, str]) -> None:
    _write(keep / SUMS, "".join(f"{digest}  {name}\n" for name, digest in sorted(sums.items())).encode(), keep)


def check_kept(keep: Path, dropped_ok: bool = False) -> dict[str, str]:
    """``keep``'s checksums, after checking that every file in it is listed in ``SHA256SUMS`` with the sha256 it
    has, and every listed file is there: a ``ValueError`` naming the first that is not (no link is followed).
    ``dropped_ok``: a listed file that is gone is left out of the checksums returned (keep writes it again)."""
    if not keep.is_dir():
        return {}
    listing, sums, found = keep / SUMS, {}, []
    refuse_links(listing, below=keep)
    lines = _read(listing, keep).decode("utf-8", "replace").splitlines() if listing.exists() else []
    for number, line in enumerate(lines, 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or not name or name.startswith("/") or ".." in Path(name).parts:
            raise ValueError(f"{listing} line {number} is not '<sha256>  <path>': check it out of git again")
        sums[name] = digest
    for folder, folders, files in os.walk(keep):
        for name in sorted(folders + files):
            path = Path(folder) / name
            if path.is_symlink():
                raise ValueError(f"{path} is a symlink: a kept folder holds none (keep never writes one); delete it")
        found += [(Path(folder) / name).relative_to(keep).as_posix() for name in files]
    for name in sorted(found):
        if name != SUMS and name not in sums:
            raise ValueError(f"{keep / name} is not listed in {keep / SUMS}: keep did not write it; delete it, "
                             "or check the folder out of git again")
    for name, digest in sorted(sums.copy().items()):
        path = keep / name
        if not path.is_file() and dropped_ok and not path.is_symlink():
            del sums[name]
            continue
        if not path.is_file():
            raise ValueError(f"{path} is listed in {keep / SUMS} but missing: check the folder out of git again")
        if hashlib.sha256(_read(path, keep)).hexdigest() != digest:
            raise ValueError(f"{path} does not match its sha256 in {keep / SUMS}: the kept file was changed; "
                             "check it out of git again")
    return sums


def _warm(source: Path, target: Path, folders: tuple[str, ...], sums: dict[str, str] | None = None) -> None:
    """The warm starts' files copied from ``source/<folder>`` into ``target/<folder>`` (each of ``folders``) where
    ``target`` has none; with ``sums`` (``target`` is the kept folder), each copy's sha256 recorded there."""
    for warm in folders:
        if (source / warm / "sft.json").is_file() and not (target / warm / "sft.json").is_file():
            for name in WARM_FILES:
                if (source / warm / name).is_file() or (source / warm / name).is_symlink():
                    _put(_read(source / warm / name, source), target / warm / name, target, sums)


def _policies(root: Path, bed: Played) -> list[str]:
    folder = root / bed.folder
    return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def machine_of(root: Path, name: str, bed: Played) -> str | None:
    """The CPU that played ``name``'s job, as kept beside its episode log (``None`` for a job not kept, or kept
    before machines were recorded); a ``machine.json`` that names no CPU is a ``ValueError`` naming it."""
    path = _job(root, name, bed) / MACHINE
    if not path.is_file():
        return None
    try:
        cpu = json.loads(path.read_text(encoding="utf-8")).get("cpu")
    except (ValueError, UnicodeDecodeError, AttributeError):
        cpu = None
    if not isinstance(cpu, str) or not cpu:
        raise ValueError(f"{path} is not a machine record (a JSON object whose 'cpu' is a CPU's name): restore it")
    return cpu


def units_spanning_machines(cpus_by_unit: dict[Any, set[str]]) -> list[Any]:
    """The pairing units (sorted) whose runs were played on more than one CPU: float results differ between CPUs,
    so such a unit's arms are paired across machines."""
    return sorted(unit for unit, cpus in cpus_by_unit.items() if len(cpus) > 1)


def keep_finished(out: Path, keep: Path, bed: Played) -> list[str]:
    """Copy into ``keep`` the warm start's model (once) and every policy evaluated on every game in ``out`` that
    ``keep`` does not hold complete yet, with its curve and the machine it ran on, each file's sha256 added to
    ``SHA256SUMS``, and the final policy of each such job the testbed keeps (``bed.kept_policy_warm``); returns the
    policies copied. ``keep`` is checked first (``check_kept``)."""
    sums = check_kept(keep, dropped_ok=True)
    _warm(out, keep, bed.warm_folders, sums)
    _write_sums(keep, sums)
    copied = []
    for name in _policies(out, bed):
        if not evaluation_complete(keep, name, bed, kept=True) and evaluation_complete(out, name, bed):
            _keep_run(out, keep, name, sums)
            _put((json.dumps(machine(), indent=1) + "\n").encode(), _job(keep, name, bed) / MACHINE, keep, sums)
            log = gzip.compress(_read(_log(out, name, bed, kept=False), out), mtime=0)
            _put(log, _log(keep, name, bed, kept=True), keep, sums)  # last: it marks the job kept
            _write_sums(keep, sums)
            copied.append(name)
    for name in _policies(keep, bed):
        warm = bed.kept_policy_warm(name)
        run_dir = out / "runs" / name  # (a job restored from keep on another machine has no checkpoint here)
        has_policy = (run_dir / "checkpoint.pt").is_file() or (run_dir / "policy" / "text_policy.json").is_file()
        if warm is not None and has_policy and not (keep / "policies" / name / DELTA).is_file():
            _keep_policy(final_policy(run_dir), keep, name, warm, sums)
            _write_sums(keep, sums)
    return copied


def final_policy(run_dir: Path) -> Path:
    """The run's final policy as a text-policy folder in float16, ``run_dir/policy`` (written from its checkpoint
    where it is not there yet)."""
    from ecpo_train.evaluation.agents import load_checkpoint_policy
    from ecpo_train.files.atomic import replaced_folder

    folder = run_dir / "policy"
    if not (folder / "text_policy.json").is_file():
        policy, _ = load_checkpoint_policy(run_dir)
        with replaced_folder(folder, below=run_dir) as partial:
            policy.save_pretrained(partial, half=True)
    return folder


def _keep_policy(folder: Path, keep: Path, name: str, warm: str, sums: dict[str, str]) -> None:
    """The policy folder ``folder`` kept in ``keep/policies/<name>/``: its weights as their difference from ``keep``'s
    warm start ``warm``, its config and checksums as they are; the difference last (it marks the policy kept)."""
    from ecpo_train.files.weights_delta import difference

    target = keep / "policies" / name
    for file in POLICY_FILES:
        _put(_read(folder / file, folder), target / file, keep, sums)
    weights = _read(folder / "text_policy.safetensors", folder)
    _put(difference(weights, _read(keep / warm / "text_policy.safetensors", keep)), target / DELTA, keep, sums)


def _restore_policy(keep: Path, out: Path, name: str, bed: Played) -> None:
    """``keep``'s final policy ``name`` rebuilt into ``out/runs/<name>/policy`` where that has none, from the warm
    start the testbed names for it; a rebuilt folder that does not match its kept checksums is a ``ValueError`` naming
    the kept difference, and nothing is written."""
    from ecpo_train.files.atomic import replaced_folder
    from ecpo_train.files.checksums import check_folder_checksums
    from ecpo_train.files.weights_delta import rebuild

    kept, folder, warm = keep / "policies" / name, out / "runs" / name / "policy", bed.kept_policy_warm(name)
    if (folder / "text_policy.json").is_file():
        return
    if warm is None:
        raise ValueError(f"{kept} holds a final policy its testbed does not keep: delete it, or check the folder out "
                         "of git again")
    weights = rebuild(_read(kept / DELTA, keep), _read(keep / warm / "text_policy.safetensors", keep))
    with replaced_folder(folder, below=out) as partial:  # (a failed check inside removes the partial folder)
        (partial / "text_policy.safetensors").write_bytes(weights)
        for file in POLICY_FILES:
            (partial / file).write_bytes(_read(kept / file, keep))
        check_folder_checksums(partial, f"{kept / DELTA} does not rebuild the policy its checksums list",
                               fix="check the folder out of git again")


def restore_kept(keep: Path, out: Path, bed: Played) -> list[str]:
    """Put ``keep``'s warm start and complete evaluations back into ``out`` where ``out`` lacks them (each episode log
    as the leaderboard writes it, and its training run's curve and config, which the reports of a study's curves and
    diagnostics read); returns the policies whose log was restored. ``keep`` is checked first (``check_kept``: an
    edited, damaged or unlisted file is a ``ValueError``), and each restored log must cover every game."""
    check_kept(keep)
    for name in _policies(keep, bed):  # every kept machine record read before anything is written
        machine_of(keep, name, bed)
    _warm(keep, out, bed.warm_folders)
    restored = []
    for name in _policies(keep, bed):
        if evaluation_complete(keep, name, bed, kept=True) and not evaluation_complete(out, name, bed):
            kept = _log(keep, name, bed, kept=True)
            data = _gunzip(kept, keep)
            if _games(data, bed) != manifest_games(bed):  # (checked before anything of out is replaced)
                raise ValueError(f"{kept} holds records of {_games(data, bed)} of the {manifest_games(bed)} games of "
                                 f"{bed.manifest}: it is not a finished job's log")
            _write(_log(out, name, bed, kept=False), data, out)
            if (_job(keep, name, bed) / MACHINE).is_file():
                _write(_job(out, name, bed) / MACHINE, _read(_job(keep, name, bed) / MACHINE, keep), out)
            restored.append(name)
        if evaluation_complete(keep, name, bed, kept=True):
            _restore_run(keep, out, name)
        if (keep / "policies" / name / DELTA).is_file():
            _restore_policy(keep, out, name, bed)
    return restored


def _keep_run(out: Path, keep: Path, name: str, sums: dict[str, str]) -> None:
    """The training run ``out/runs/<name>``'s curve and config, gzipped into ``keep/runs/<name>/``."""
    for plain in (out / "runs" / name / f for f in reversed(RUN_FILES)):  # the curve last: it marks the run kept
        if plain.is_file() or plain.is_symlink():  # (gzip's mtime 0: the same bytes each time)
            _put(gzip.compress(_read(plain, out), mtime=0), keep / "runs" / name / f"{plain.name}.gz", keep, sums)


def _restore_run(keep: Path, out: Path, name: str) -> None:
    """``keep``'s curve and config of the training run ``name`` put back into ``out/runs/<name>`` where it lacks them."""
    for file in RUN_FILES:
        kept_run, plain = keep / "runs" / name / f"{file}.gz", out / "runs" / name / file
        if kept_run.is_file() and not plain.exists():
            _write(plain, _gunzip(kept_run, keep), out)


def run_kept(keep: Path, name: str) -> bool:
    """Whether ``keep`` holds the training run ``name``'s curve (kept after its config: the curve marks it)."""
    return (keep / "runs" / name / f"{RUN_FILES[0]}.gz").is_file()


def keep_runs(out: Path, keep: Path, names: list[str]) -> list[str]:
    """Copy into ``keep`` the curve and config of each training run ``out/runs/<name>`` of ``names`` that ``keep`` does
    not hold yet (a study whose runs play no endpoint, such as the regime study's recipe tuning: the caller keeps a run
    once it has finished), each file's sha256 added to ``SHA256SUMS``; returns the runs copied. ``keep`` is checked
    first (``check_kept``)."""
    sums = check_kept(keep, dropped_ok=True)
    copied = [name for name in names if not run_kept(keep, name) and (out / "runs" / name / RUN_FILES[0]).is_file()]
    for name in copied:
        _keep_run(out, keep, name, sums)
        _write_sums(keep, sums)
    return copied


def restore_runs(keep: Path, out: Path, names: list[str]) -> list[str]:
    """Put ``keep``'s curve and config of each training run of ``names`` back into ``out/runs/<name>`` where ``out``
    lacks them; returns the runs ``keep`` holds. ``keep`` is checked first (``check_kept``)."""
    check_kept(keep)
    held = [name for name in names if run_kept(keep, name)]
    for name in held:
        _restore_run(keep, out, name)
    return held
