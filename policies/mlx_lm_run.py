"""Run an mlx-lm command with a policy's caches: ``python -m policies.mlx_lm_run --policy lowpeak -- generate ...``.

Everything after ``--`` is mlx-lm's own command line (``python -m mlx_lm <command> ...``: ``generate``,
``server``, ``chat``, ``cache_prompt``, ...); it runs under :func:`policies.mlx_install.install`.
"""

from __future__ import annotations

import argparse
import sys

from policies.mlx_install import install, policy_arg


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m policies.mlx_lm_run",
        description="Run an mlx-lm command (after --) with kvsim's policy caches in place of mlx-lm's KVCache.",
    )
    parser.add_argument(
        "--policy",
        required=True,
        help='a policy name (lowpeak) or a JSON policy object ({"name": "step", "step": 512})',
    )
    parser.add_argument(
        "--max-context", type=int, default=None, help="context tokens, for full / cap: context / prealloc"
    )
    parser.add_argument("mlx_lm_args", nargs=argparse.REMAINDER, help="-- then the mlx-lm command and its arguments")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse, install the policy, hand the rest to ``mlx_lm.cli.main``; bad input is one line and exit 2."""
    args = _parser().parse_args(argv)
    rest = args.mlx_lm_args[1:] if args.mlx_lm_args[:1] == ["--"] else args.mlx_lm_args
    if not rest:
        print("mlx_lm_run: mlx_lm_args: give the mlx-lm command after --, got nothing", file=sys.stderr)
        return 2
    try:
        installed = install(policy_arg(args.policy), max_context=args.max_context)
    except ValueError as err:
        print(f"mlx_lm_run: {err}", file=sys.stderr)
        return 2
    from mlx_lm import cli

    sys.argv = ["mlx_lm", *rest]
    with installed:
        cli.main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
