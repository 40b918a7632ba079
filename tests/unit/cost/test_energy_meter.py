"""The energy meter's start: codecarbon learns the CPU's name without py-cpuinfo's probe."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evalsentry.cost.meter import proc_cpu_name

ROOT = Path(__file__).parents[3]
X86 = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 85
model name\t: Intel(R) Xeon(R) Processor
stepping\t: 7
"""
needs_a_named_cpu = pytest.mark.skipif(
    proc_cpu_name() is None, reason="this machine's /proc/cpuinfo names no CPU (not Linux?)"
)

#: Starts a meter and measures one block in a fresh process (codecarbon keeps what it detected
#: for the life of a process), watching the command lines of the processes it starts.
START = """
import json, sys
started = []
sys.addaudithook(lambda event, args: event == "subprocess.Popen" and started.append(repr(args[1])))
import cpuinfo
from codecarbon.core.util import detect_cpu_model
from evalsentry.cost.meter import CostMeter
own = cpuinfo.get_cpu_info
meter = CostMeter()
with meter.measure("block") as measured:
    sum(range(2_000_000))
meter.close()
print(json.dumps({
    "cpuinfo_processes": [a for a in started if "cpuinfo" in a],
    "name": detect_cpu_model(),
    "method": measured.method,
    "energy_kwh": measured.energy_kwh,
    "restored": cpuinfo.get_cpu_info is own,
}))
"""


@pytest.mark.parametrize(
    ("text", "name"),
    [
        (X86, "Intel(R) Xeon(R) Processor"),
        ("processor\t: 0\ncpu\t\t: POWER9 (raw)\n", "POWER9 (raw)"),
        ("processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n", None),  # ARM: no name
        ("model name\t:\nprocessor\t: 3\n", None),  # empty and numeric values name nothing
        ("", None),
    ],
)
def test_the_name_is_read_as_py_cpuinfo_reads_it(text: str, name: str | None) -> None:
    """The first line keyed by a name key with a value that is not a number, as py-cpuinfo does."""
    assert proc_cpu_name(text) == name


@needs_a_named_cpu
def test_the_name_is_the_one_py_cpuinfo_gives() -> None:
    """On this machine, the same name as py-cpuinfo's own answer (its probe and all)."""
    import cpuinfo

    assert proc_cpu_name() == cpuinfo.get_cpu_info()["brand_raw"]


@needs_a_named_cpu
def test_a_meter_measures_with_codecarbon_and_starts_no_py_cpuinfo_process() -> None:
    """codecarbon measures, knows the CPU by its name, and no py-cpuinfo process spins a core.

    py-cpuinfo's own answer is back in place once the tracker has started.
    """
    done = subprocess.run(
        [sys.executable, "-c", START],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["cpuinfo_processes"] == []
    assert seen["name"] == proc_cpu_name()
    assert seen["method"].startswith("codecarbon") and seen["energy_kwh"] > 0
    assert seen["restored"] is True
