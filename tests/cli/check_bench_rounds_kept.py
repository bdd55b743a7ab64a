#!/usr/bin/env python3
"""`syncmem bench --rounds N --json F` stopped part way keeps the rounds it finished.

Starts a quick run of many rounds, waits until the second round has begun (by
then the first round is in F), kills the run, and checks that F is whole:
valid JSON whose `rounds` says how many rounds it holds, each benchmark once
per round, none of them failed.

    check_bench_rounds_kept.py --work DIR -- SYNCMEM
"""

import argparse
import collections
import json
import os
import re
import signal
import subprocess
import sys


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = [c for c in args.command if c != "--"]
    os.makedirs(args.work, exist_ok=True)
    results = os.path.join(args.work, "rounds.json")
    if os.path.exists(results):
        os.remove(results)

    run = subprocess.Popen(
        command + ["bench", "--quick", "--filter", "^memcpy/h2h/", "--rounds", "1000", "--json", results],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    per_round = None
    seen = []
    try:
        for line in run.stdout:
            seen.append(line)
            header = re.match(r"syncmem bench: (\d+) benchmarks?, 1000 rounds", line)
            if header:
                per_round = int(header.group(1))
            progress = re.match(r"\[(\d+)/\d+\] ", line)
            if progress and per_round is not None and int(progress.group(1)) > per_round:
                break  # the second round has begun: the first is saved
        else:
            print("".join(seen))
            print("the run ended before its second round began")
            return 1
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()

    if not os.path.exists(results):
        print("".join(seen))
        print(f"{results} does not exist: the run saved nothing of the rounds it finished")
        return 1
    with open(results, encoding="utf-8") as f:
        document = json.load(f)
    rounds = document["rounds"]
    names = collections.Counter(r["name"] for r in document["runs"])
    failed = [r["name"] for r in document["runs"] if r.get("error")]
    problems = []
    if rounds < 1:
        problems.append(f"rounds is {rounds}")
    if len(names) != per_round:
        problems.append(f"{len(names)} benchmarks saved, the run had {per_round}")
    uneven = {n: c for n, c in names.items() if c != rounds}
    if uneven:
        problems.append(f"benchmarks not saved once per round ({rounds} rounds): {uneven}")
    if failed:
        problems.append(f"failed runs: {failed}")
    if problems:
        print("".join(seen))
        print("\n".join(problems))
        return 1
    print(f"{rounds} round(s) of {per_round} benchmarks kept in {results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
