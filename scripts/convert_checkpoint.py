"""Convert a native ``checkpoint.pt`` written by an older ECPO (one that needs Python's unpickler) into the current
format (tensors, plain containers, numbers and strings: ``torch.load(weights_only=True)`` reads it):
``python scripts/convert_checkpoint.py RUN_DIR_OR_CHECKPOINT --trust``.

Converting UNPICKLES the file: a checkpoint can run any code it carries while it loads. Convert only a file you
wrote yourself or got from someone you trust; without ``--trust`` the script says so and changes nothing. The
file is replaced whole (the old one stays until the new one is written); ``--out`` writes elsewhere instead.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

from ecpo_train.runtime.checkpoint_io import load_checkpoint, plain_state, save_checkpoint
from ecpo_train.runtime.run_dir import checkpoint_file

WARNING = ("converting {path} unpickles it, and unpickling runs any code the file carries: convert only a "
           "checkpoint you wrote or trust")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/convert_checkpoint.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="a run folder, or its checkpoint.pt")
    parser.add_argument("--trust", action="store_true", help="I trust this file: unpickle it")
    parser.add_argument("--out", help="where to write the converted checkpoint (default: in place)")
    args = parser.parse_args(argv)
    path = checkpoint_file(args.checkpoint)
    if not path.is_file():
        print(f"error: {path} not found", file=sys.stderr)
        return 2
    if not args.trust:
        print(f"error: {WARNING.format(path=path)}; pass --trust to go ahead", file=sys.stderr)
        return 2
    try:
        load_checkpoint(path)
        print(f"{path} is already in the current format", file=sys.stderr)
        return 0
    except ValueError as err:
        if "sha256" in str(err):  # a current checkpoint damaged since: converting would checksum the damage anew
            print(f"error: {err}", file=sys.stderr)
            return 2
    print(f"warning: {WARNING.format(path=path)}", file=sys.stderr)
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # noqa: BLE001 -- a damaged file: torch's own types
        print(f"error: {path} cannot be read ({type(err).__name__})", file=sys.stderr)
        return 2
    if not isinstance(state, dict) or "iteration" not in state or "policy" not in state:
        print(f"error: {path} is not an ECPO trainer checkpoint", file=sys.stderr)
        return 2
    buffer = io.BytesIO()  # what the trainer will read must load without the unpickler: checked before writing
    torch.save(plain_state(state), buffer)
    buffer.seek(0)
    try:
        torch.load(buffer, weights_only=True)
    except Exception as err:  # noqa: BLE001 -- torch's UnpicklingError names the object it would not load
        print(f"error: {path} holds objects the current format cannot hold ({str(err).splitlines()[0][:200]})",
              file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else path
    try:
        save_checkpoint(state, out)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
