"""Start the guest and the host of ``job.yaml`` as two ``unifl run`` processes on loopback ports and
print what each reports.  (``unifl demo`` does the same with the shipped configs.)"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    ports = {"guest": free_port(), "host": free_port()}
    other = {"guest": "host", "host": "guest"}
    with tempfile.TemporaryDirectory() as out:
        procs = {}
        for role in ("guest", "host"):
            cmd = [sys.executable, "-m", "unifl", "run", "--config", str(HERE / f"{role}.yaml"),
                   "--job", str(HERE / "job.yaml"), "--listen", f"127.0.0.1:{ports[role]}",
                   "--peer", f"{other[role]}=127.0.0.1:{ports[other[role]]}",
                   "--json-out", str(Path(out) / f"{role}.json"), "--no-progress", "--no-table"]
            procs[role] = subprocess.Popen(cmd)
        codes = {role: p.wait(timeout=600) for role, p in procs.items()}
        for role in ("guest", "host"):
            result = json.loads((Path(out) / f"{role}.json").read_text())
            print(f"--- {role} (exit {codes[role]})")
            if "error" in result:
                print(f"  error: {result['error']}")
                continue
            if "intersection_size" in result:
                print(f"  PSI intersection: {result['intersection_size']} ids")
            for name, value in (result.get("metrics") or {}).items():
                print(f"  {name}: {value}")
            sel = result["backend"]
            print(f"  asked for {sel['requested']}, ran on {sel['chosen']}"
                  + "".join(f"; not used: {ev['backend']} ({ev['reason']})"
                            for ev in sel["fallback_events"]))
            for row in sel["report"]:
                print(f"    {row['op']:<24} {row['elements']:>7} elements in {row['calls']:>4} "
                      f"calls on {row['backend']}")
    return max(codes.values())


if __name__ == "__main__":
    sys.exit(main())
