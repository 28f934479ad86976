"""Operate groupkit groups (describe, list, reset offsets), assignors, the demo and a local broker.

Each subcommand is one ``_cmd_*`` function; ``main`` returns the process exit code
(0 ok, 1 failure, 2 bad input or usage).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from groupkit.errors import GroupkitError, InputError
from groupkit.types import MemberSubscription, TopicPartition


def _parse_assign_input(
    doc: Any,
) -> tuple[dict[str, int], dict[str, MemberSubscription], dict[TopicPartition, int]]:
    if not isinstance(doc, dict):
        raise InputError("input must be a JSON object with 'partitions' and 'members'")
    parts = doc.get("partitions")
    members = doc.get("members")
    if not isinstance(parts, dict):
        raise InputError("'partitions' must be an object mapping topic to partition count")
    if not isinstance(members, dict):
        raise InputError("'members' must be an object mapping member id to its subscription")
    counts: dict[str, int] = {}
    for topic, n in parts.items():
        if not isinstance(n, int) or isinstance(n, bool):
            raise InputError(f"partition count of {topic!r} must be an integer")
        counts[str(topic)] = n
    subs: dict[str, MemberSubscription] = {}
    for mid, m in members.items():
        if not isinstance(m, dict) or not isinstance(m.get("topics"), list):
            raise InputError(f"member {mid!r} needs a 'topics' list")
        owned_raw = m.get("owned", [])
        if not isinstance(owned_raw, list) or not all(
            isinstance(o, list) and len(o) == 2 and isinstance(o[1], int) for o in owned_raw
        ):
            raise InputError(f"member {mid!r}: 'owned' must be a list of [topic, partition]")
        gen = m.get("generation")
        if gen is not None and (not isinstance(gen, int) or isinstance(gen, bool)):
            raise InputError(f"member {mid!r}: 'generation' must be an integer")
        rack = m.get("rack")
        cap = m.get("capacity")
        if cap is not None and not isinstance(cap, (int, float)):
            raise InputError(f"member {mid!r}: 'capacity' must be a number")
        subs[str(mid)] = MemberSubscription(
            [str(t) for t in m["topics"]],
            owned=[(str(t), p) for t, p in owned_raw],
            generation=gen,
            rack=None if rack is None else str(rack),
            capacity=None if cap is None else float(cap),
        )
    lags: dict[TopicPartition, int] = {}
    raw_lags = doc.get("lags", {})
    if not isinstance(raw_lags, dict):
        raise InputError("'lags' must be an object mapping topic to a list of lags by partition")
    for topic, values in raw_lags.items():
        if not isinstance(values, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in values
        ):
            raise InputError(f"lags of {topic!r} must be a list of integers")
        for p, v in enumerate(values):
            lags[TopicPartition(str(topic), p)] = v
    return counts, subs, lags


def _parse_racks(doc: dict[str, Any]) -> dict[str, list[list[str]]]:
    """``"racks": {"t0": [["a", "b"], ["b", "c"]]}``: each partition's replica racks, in order."""
    raw = doc.get("racks", {})
    if not isinstance(raw, dict):
        raise InputError("'racks' must be an object mapping topic to replica racks by partition")
    racks: dict[str, list[list[str]]] = {}
    for topic, per_partition in raw.items():
        if not isinstance(per_partition, list) or not all(
            isinstance(rs, list) and all(isinstance(r, str) for r in rs) for rs in per_partition
        ):
            raise InputError(f"racks of {topic!r} must be a list of lists of rack names")
        racks[str(topic)] = per_partition
    return racks


def _cmd_assign(args: argparse.Namespace) -> int:
    from groupkit.assignors import get_assignor
    from groupkit.assignors.base import reads_racks

    assignor = get_assignor(args.assignor)
    try:
        doc = json.load(sys.stdin)
    except json.JSONDecodeError as e:
        raise InputError(f"invalid JSON on stdin: {e}") from None
    counts, subs, lags = _parse_assign_input(doc)
    racks = _parse_racks(doc)
    try:
        if racks and reads_racks(assignor):
            result = assignor.assign(counts, subs, lags or None, racks=racks)
        else:
            result = assignor.assign(counts, subs, lags or None)
    except ValueError as e:
        raise InputError(str(e)) from None
    out = {"assignment": {m: [[tp.topic, tp.partition] for tp in tps] for m, tps in result.items()}}
    json.dump(out, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


def _cmd_broker(args: argparse.Namespace) -> int:
    from groupkit.dev import broker as dev_broker

    return dev_broker.cli(args)


def _client_config(args: argparse.Namespace) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": args.bootstrap_servers}
    for item in args.config or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"-X takes key=value, got {item!r}")
        conf[key] = value
    return conf


def _cmd_describe(args: argparse.Namespace) -> int:
    from groupkit.runtime.describe import describe_group, render

    conf = {**_client_config(args), "group.id": args.group,
            "groupkit.control.topic": args.control_topic}  # fmt: skip
    view = "members" if args.members else "state" if args.state else "partitions"
    samples = args.status_samples if args.status else 0
    if samples < 0 or args.status_interval < 0:
        raise InputError("--status-samples and --status-interval must not be negative")
    desc = describe_group(conf, with_lag=not args.no_lag, status_samples=samples,
                          status_interval=args.status_interval)  # fmt: skip
    print(render(desc, as_json=args.json, view=view))
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from groupkit.runtime.describe import list_groups, render_list

    conf = {**_client_config(args), "groupkit.control.topic": args.control_topic}
    print(render_list(list_groups(conf), as_json=args.json))
    return 0


def _cmd_reset_offsets(args: argparse.Namespace) -> int:
    from groupkit.runtime.reset import (
        execute_reset,
        parse_topics,
        plan_reset,
        render_plan,
        scenario_of,
    )

    scenario = scenario_of(vars(args))
    if bool(args.topic) == args.all_topics:
        raise InputError("give --topic T[:P,...] (repeatable) or --all-topics, not both")
    if args.execute and args.dry_run:
        raise InputError("--dry-run and --execute exclude each other")
    conf = {**_client_config(args), "group.id": args.group,
            "groupkit.control.topic": args.control_topic}  # fmt: skip
    plan = plan_reset(conf, scenario, None if args.all_topics else parse_topics(args.topic),
                      timeout=args.timeout)  # fmt: skip
    print(render_plan(plan, as_json=args.json))
    if not args.execute:
        if not args.json:
            print("\n(dry run: nothing changed; add --execute to apply it)")
        return 0
    out = execute_reset(conf, plan, timeout=args.timeout)
    if not args.json:
        if out.how == "committed":
            print(f"\nThe group is empty: offsets committed for {len(out.committed_directly)} "
                  "partitions.")  # fmt: skip
        else:
            print(f"\nReset applied (control offset {out.reset_offset}); acknowledged by "
                  f"{len(out.acknowledged_by)} live member(s): "
                  f"{', '.join(out.acknowledged_by) or '-'}")  # fmt: skip
            if out.committed_directly:
                print(f"Committed directly (no live member consumes them): "
                      f"{', '.join(str(p) for p in out.committed_directly)}")  # fmt: skip
    return 0


def _connection_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-servers", required=True)
    p.add_argument("--control-topic", default="__groupkit")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "-X",
        dest="config",
        action="append",
        metavar="KEY=VALUE",
        help="extra client setting, e.g. -X security.protocol=SASL_PLAINTEXT",
    )


def _cmd_demo(args: argparse.Namespace) -> int:
    from groupkit.dev import demo

    return demo.run(args)


def _cmd_replay(args: argparse.Namespace) -> int:
    from groupkit import pipeline

    try:
        return pipeline.run(args)
    except ValueError as e:
        raise InputError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="groupkit", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("assign", help="run an assignor on JSON from stdin, print JSON")
    p.add_argument("--assignor", required=True, help="assignor name, e.g. range, sticky, balanced")
    p.set_defaults(func=_cmd_assign)

    p = sub.add_parser(
        "describe",
        help="a group's partitions (offsets, lag, owner), members or state, "
        "as kafka-consumer-groups --describe",
    )
    _connection_arguments(p)
    p.add_argument("--group", required=True)
    views = p.add_mutually_exclusive_group()
    views.add_argument("--members", action="store_true", help="one line per member")
    views.add_argument("--state", action="store_true", help="the group's state, leader, strategy")
    p.add_argument("--no-lag", action="store_true", help="skip fetching offsets")
    p.add_argument(
        "--status",
        action="store_true",
        help="judge each partition by Burrow's rules over a few reads of its offsets "
        "(a STATUS column and the group's status)",
    )
    p.add_argument("--status-samples", type=int, default=3, metavar="N",
                   help="reads of the offsets for --status (default 3)")  # fmt: skip
    p.add_argument("--status-interval", type=float, default=1.0, metavar="SECONDS",
                   help="seconds between those reads (default 1)")  # fmt: skip
    p.set_defaults(func=_cmd_describe)

    p = sub.add_parser(
        "reset-offsets",
        help="reset a group's committed offsets, safely on a running group "
        "(as kafka-consumer-groups --reset-offsets); a dry run unless --execute",
    )
    _connection_arguments(p)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", action="append", default=[], metavar="T[:P,...]",
                   help="a topic, or some of its partitions (repeatable)")  # fmt: skip
    p.add_argument("--all-topics", action="store_true",
                   help="every topic the group's members subscribe to")  # fmt: skip
    p.add_argument("--to-earliest", action="store_true")
    p.add_argument("--to-latest", action="store_true")
    p.add_argument("--to-offset", type=int, metavar="N")
    p.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                   help="the first offset stamped at or after it (no zone: UTC)")  # fmt: skip
    p.add_argument("--by-duration", metavar="PnDTnHnMnS",
                   help="the first offset stamped at or after now less this")  # fmt: skip
    p.add_argument("--shift-by", type=int, metavar="N", help="current offset + N (may be < 0)")
    p.add_argument("--dry-run", action="store_true", help="print the plan only (the default)")
    p.add_argument("--execute", action="store_true", help="apply the plan")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds to wait for every live member to acknowledge")  # fmt: skip
    p.set_defaults(func=_cmd_reset_offsets)

    p = sub.add_parser("list", help="the groups on a control topic, with their state")
    _connection_arguments(p)
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser(
        "replay", help="replay lag telemetry through every assignor on Spark; report the best"
    )
    from groupkit.pipeline import add_arguments as replay_arguments

    replay_arguments(p)
    p.set_defaults(func=_cmd_replay)

    p = sub.add_parser(
        "demo", help="a broker, a skewed producer and members with /metrics, watched live"
    )
    from groupkit.dev.demo import add_arguments as demo_arguments

    demo_arguments(p)
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("broker", help="start, stop or inspect the local development broker")
    p.add_argument("action", choices=["start", "stop", "status", "fetch"])
    p.add_argument("--dir", default=None, help="state folder (default ~/.cache/groupkit/broker)")
    p.add_argument(
        "--kafka-version",
        default=None,
        help="Apache Kafka version to run (default: the newest tested; fetch: every tested one)",
    )
    p.add_argument(
        "--port", type=int, default=0, help="listener port (default: 9092 if free, else a free one)"
    )
    p.add_argument(
        "--brokers",
        type=int,
        default=1,
        help="start: nodes (3: a cluster with replication factor 3, racks r0..r2)",
    )
    p.set_defaults(func=_cmd_broker)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except GroupkitError as e:
        print(f"groupkit {args.command}: {e}", file=sys.stderr)
        return 2 if isinstance(e, ValueError) else 1


if __name__ == "__main__":
    sys.exit(main())
