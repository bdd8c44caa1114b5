#!/usr/bin/env python3
"""Lock (and later restore) CPU, NPU and DDR clocks on RK3588 / RK3576 boards.

Timings are only comparable with fixed clocks: the default governors ramp the NPU
and the CPU clusters up and down between chunks. This tool sets the `userspace`
governor on every CPU policy of the SoC and on the NPU and DDR devfreq devices, and
pins each to a frequency taken from the node's own list of available frequencies
(never a hard-coded value a board may not offer).

Before it changes anything it saves the previous governors / frequencies / cpuidle
states to a JSON state file, so `--mode unlock` puts back exactly what was there.

Standard library only; runs as root on the board. Every path is taken relative to
`--sysfs-root` (default "/") so the tests can point it at a fake sysfs tree.

    sudo deploy/lock_clocks.py --mode lock                # max CPU/NPU/DDR
    sudo deploy/lock_clocks.py --mode lock --npu 800000000 --ddr skip --disable-cpuidle
    deploy/lock_clocks.py --mode status
    sudo deploy/lock_clocks.py --mode unlock

Units: CPU frequencies in kHz (cpufreq convention), NPU/DDR in Hz (devfreq convention).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from pathlib import Path
from typing import Optional, Sequence

STATE_FORMAT = 1  # bump when the state-file layout changes
DEFAULT_STATE_FILE = "run/qwen3asr-clocks.json"  # relative to --sysfs-root; /run is tmpfs

CPUFREQ_DIR = "sys/devices/system/cpu/cpufreq"
CPU_DIR = "sys/devices/system/cpu"
DEVFREQ_DIR = "sys/class/devfreq"
DDR_DEVFREQ = "dmc"
COMPATIBLE_FILES = ("proc/device-tree/compatible", "sys/firmware/devicetree/base/compatible")
NPU_LOAD_FILES = ("sys/kernel/debug/rknpu/load", "proc/rknpu/load")

# Governors tried in order when restoring without a state file (first one offered wins).
CPU_DEFAULT_GOVERNORS = ("schedutil", "ondemand", "interactive", "conservative")
NPU_DEFAULT_GOVERNORS = ("rknpu_ondemand", "simple_ondemand")
DDR_DEFAULT_GOVERNORS = ("dmc_ondemand", "simple_ondemand")


@dataclasses.dataclass(frozen=True)
class SocLayout:
    """Clock domains of one SoC (names under sysfs)."""

    name: str
    cpu_policies: tuple[str, ...]  # directories under sys/devices/system/cpu/cpufreq
    npu_devfreq: str  # directory under sys/class/devfreq
    npu_cores: int


# RK3588: policy0 = 4x A55, policy4 and policy6 = 2x A76 each.
# RK3576: policy0 = 4x A53 (little), policy4 = 4x A72 (big); the device tree lists the
# A53 nodes first, so Linux numbers them cpu0-3 (see docs/board_setup.md).
SOCS = {
    "rk3588": SocLayout("rk3588", ("policy0", "policy4", "policy6"), "fdab0000.npu", 3),
    "rk3576": SocLayout("rk3576", ("policy0", "policy4"), "27700000.npu", 2),
}


class ClockError(RuntimeError):
    """A node is missing, a requested value is not offered, or the kernel refused a write."""


@dataclasses.dataclass(frozen=True)
class Write:
    """One sysfs write: `value` goes to `path` (absolute, under the sysfs root)."""

    path: Path
    value: str


@dataclasses.dataclass(frozen=True)
class FreqDomain:
    """A cpufreq policy or a devfreq device: same steps, different file names."""

    label: str  # for messages: "cpu policy4", "npu", "ddr"
    key: str  # state-file key: "policy4", "fdab0000.npu", "dmc"
    node: Path  # the policy / device directory
    is_cpu: bool  # cpufreq (kHz, scaling_* files) or devfreq (Hz)
    default_governors: tuple[str, ...]

    @property
    def unit(self) -> str:
        return "kHz" if self.is_cpu else "Hz"

    @property
    def governor_file(self) -> Path:
        return self.node / ("scaling_governor" if self.is_cpu else "governor")

    @property
    def governors_file(self) -> Path:
        return self.node / ("scaling_available_governors" if self.is_cpu else "available_governors")

    @property
    def frequencies_file(self) -> Path:
        return self.node / ("scaling_available_frequencies" if self.is_cpu else "available_frequencies")

    @property
    def setspeed_file(self) -> Path:
        # devfreq creates userspace/ only while the userspace governor runs.
        return self.node / ("scaling_setspeed" if self.is_cpu else "userspace/set_freq")

    @property
    def cur_freq_file(self) -> Path:
        return self.node / ("scaling_cur_freq" if self.is_cpu else "cur_freq")

    @property
    def max_freq_file(self) -> Path:
        return self.node / ("scaling_max_freq" if self.is_cpu else "max_freq")


# ---------------------------------------------------------------------------- reading


def read_text(path: Path) -> str:
    """Contents of a sysfs file, stripped; ClockError naming the node if it is absent."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        raise ClockError(f"missing sysfs node {path}") from None
    except PermissionError:
        raise ClockError(f"cannot read {path}: permission denied (run as root)") from None


def read_optional(path: Path) -> Optional[str]:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def parse_int(text: Optional[str]) -> Optional[int]:
    return int(text) if text is not None and text.isdigit() else None


def detect_soc(root: Path) -> str:
    """"rk3588" or "rk3576" from the NUL-separated device-tree compatible list."""
    for rel in COMPATIBLE_FILES:
        try:
            raw = (root / rel).read_bytes()
        except OSError:
            continue
        strings = [s.decode("ascii", "replace") for s in raw.split(b"\0") if s]
        for s in strings:
            for soc in SOCS:
                # "rockchip,rk3588" and "rockchip,rk3588s" are both RK3588.
                if s.startswith(f"rockchip,{soc}"):
                    return soc
        raise ClockError(
            f"{root / rel} lists {strings}: not an RK3588 or RK3576; pass --soc rk3588|rk3576 to force one"
        )
    raise ClockError(
        f"cannot read the device tree ({', '.join(str(root / r) for r in COMPATIBLE_FILES)}); "
        "pass --soc rk3588|rk3576"
    )


def find_npu_devfreq(root: Path, soc: SocLayout) -> Path:
    """The NPU devfreq directory: the SoC's usual name, else the only `*.npu` device."""
    base = root / DEVFREQ_DIR
    node = base / soc.npu_devfreq
    if node.is_dir():
        return node
    found = sorted(base.glob("*.npu"))
    if len(found) == 1:
        return found[0]
    if not found:
        raise ClockError(
            f"missing NPU devfreq node {node} (no {base}/*.npu either): is the rknpu driver loaded? "
            "(`dmesg | grep -i rknpu`)"
        )
    raise ClockError(f"several NPU devfreq nodes under {base}: {[p.name for p in found]}")


def frequency_domains(root: Path, soc: SocLayout, with_ddr: bool) -> list[FreqDomain]:
    """CPU policies, NPU and (optionally) DDR of the SoC; ClockError if one is missing."""
    domains = []
    for policy in soc.cpu_policies:
        node = root / CPUFREQ_DIR / policy
        if not node.is_dir():
            raise ClockError(f"missing CPU policy node {node} (expected on {soc.name})")
        domains.append(FreqDomain(f"cpu {policy}", policy, node, True, CPU_DEFAULT_GOVERNORS))
    npu = find_npu_devfreq(root, soc)
    domains.append(FreqDomain("npu", npu.name, npu, False, NPU_DEFAULT_GOVERNORS))
    if with_ddr:
        node = root / DEVFREQ_DIR / DDR_DEVFREQ
        if not node.is_dir():
            raise ClockError(f"missing DDR devfreq node {node}; use --ddr skip on boards without it")
        domains.append(FreqDomain("ddr", DDR_DEVFREQ, node, False, DDR_DEFAULT_GOVERNORS))
    return domains


def cpuidle_disable_files(root: Path) -> list[Path]:
    """cpuN/cpuidle/state1/disable for every CPU that has it, in CPU order."""
    found = []
    for cpu in (root / CPU_DIR).glob("cpu[0-9]*"):
        match = re.fullmatch(r"cpu(\d+)", cpu.name)
        node = cpu / "cpuidle" / "state1" / "disable"
        if match and node.is_file():
            found.append((int(match.group(1)), node))
    return [node for _, node in sorted(found)]


def offered_frequencies(domain: FreqDomain) -> list[int]:
    text = read_text(domain.frequencies_file)
    values = sorted({int(v) for v in text.split()})
    if not values:
        raise ClockError(f"{domain.frequencies_file} is empty: cannot choose a {domain.label} frequency")
    return values


def offered_governors(domain: FreqDomain) -> list[str]:
    return read_text(domain.governors_file).split()


# ---------------------------------------------------------------------------- planning


def choose_frequency(domain: FreqDomain, request: str) -> int:
    """`request` is "max" or an integer in the domain's unit; it must be offered."""
    offered = offered_frequencies(domain)
    if request == "max":
        return offered[-1]
    value = int(request)
    if value not in offered:
        raise ClockError(
            f"{domain.label}: {value} {domain.unit} is not offered by {domain.frequencies_file}; "
            f"offered: {' '.join(str(v) for v in offered)} {domain.unit}"
        )
    return value


def lock_writes(domain: FreqDomain, request: str) -> list[Write]:
    """userspace governor, then the chosen frequency."""
    target = choose_frequency(domain, request)
    governors = offered_governors(domain)
    if "userspace" not in governors:
        raise ClockError(
            f"{domain.label}: the userspace governor is not offered ({domain.governors_file}: "
            f"{' '.join(governors)}); the kernel needs CONFIG_*_GOV_USERSPACE"
        )
    ceiling = parse_int(read_optional(domain.max_freq_file))
    if ceiling is not None and ceiling < target:
        print(
            f"warning: {domain.label}: {domain.max_freq_file} is {ceiling} {domain.unit}, below {target}; "
            "the kernel will clamp the locked frequency to it",
            file=sys.stderr,
        )
    return [Write(domain.governor_file, "userspace"), Write(domain.setspeed_file, str(target))]


def snapshot_domain(domain: FreqDomain) -> dict:
    """Governor and, under userspace, the pinned frequency (what unlock must restore)."""
    governor = read_text(domain.governor_file)
    setspeed = parse_int(read_optional(domain.setspeed_file)) if governor == "userspace" else None
    return {"governor": governor, "setspeed": setspeed}


def restore_writes(domain: FreqDomain, saved: dict) -> list[Write]:
    writes = [Write(domain.governor_file, saved["governor"])]
    if saved["governor"] == "userspace" and saved.get("setspeed") is not None:
        writes.append(Write(domain.setspeed_file, str(saved["setspeed"])))
    return writes


def default_restore_writes(domain: FreqDomain) -> list[Write]:
    """Without a state file: the first usual on-demand governor the node offers."""
    governors = offered_governors(domain)
    for name in domain.default_governors:
        if name in governors:
            return [Write(domain.governor_file, name)]
    raise ClockError(
        f"{domain.label}: none of {', '.join(domain.default_governors)} is offered "
        f"({domain.governors_file}: {' '.join(governors)}); set a governor by hand"
    )


# ---------------------------------------------------------------------------- state file


def load_state(path: Path) -> Optional[dict]:
    if not path.exists():
        return None
    try:
        state = json.loads(path.read_text())
    except ValueError as e:
        raise ClockError(f"{path} is not a valid state file ({e}); delete it and run --mode unlock again") from None
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise ClockError(f"{path} is not a state file of format {STATE_FORMAT}; delete it and run --mode unlock again")
    return state


def save_state(path: Path, state: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------- actions


def apply_writes(writes: Sequence[Write], dry_run: bool) -> None:
    for w in writes:
        if dry_run:
            print(f"would write {w.value} > {w.path}")
            continue
        print(f"write {w.value} > {w.path}")
        try:
            with open(w.path, "w") as f:
                f.write(w.value)
        except PermissionError:
            raise ClockError(f"cannot write {w.value!r} to {w.path}: permission denied (run as root)") from None
        except OSError as e:
            raise ClockError(f"the kernel refused {w.value!r} for {w.path}: {e.strerror or e}") from None


def lock(root: Path, soc: SocLayout, args: argparse.Namespace, state_file: Path) -> None:
    """Plan every write first (all checks before any change), save state, then write."""
    domains = frequency_domains(root, soc, with_ddr=args.ddr != "skip")
    plan: list[Write] = []
    for d in domains:
        request = args.cpu if d.is_cpu else (args.ddr if d.key == DDR_DEVFREQ else args.npu)
        plan += lock_writes(d, request)
    idle_files = cpuidle_disable_files(root) if args.disable_cpuidle else []
    if args.disable_cpuidle and not idle_files:
        raise ClockError(f"--disable-cpuidle: no cpu*/cpuidle/state1/disable under {root / CPU_DIR}")
    plan += [Write(p, "1") for p in idle_files]

    current = {
        "format": STATE_FORMAT,
        "soc": soc.name,
        "freq": {d.key: snapshot_domain(d) for d in domains},
        "cpuidle": {p.parent.parent.parent.name: read_text(p) for p in idle_files},
    }
    previous = load_state(state_file)
    if previous is not None:
        # Locked before: keep what was there before the first lock, add what is new.
        if previous.get("soc") != soc.name:
            raise ClockError(f"{state_file} was written for {previous.get('soc')}, this is {soc.name}")
        print(f"note: {state_file} exists from an earlier lock; keeping its saved state")
        for section in ("freq", "cpuidle"):
            merged = dict(current[section])
            merged.update(previous.get(section, {}))
            current[section] = merged
    if args.dry_run:
        print(f"would save the current state to {state_file}")
    else:
        save_state(state_file, current)
        print(f"saved the previous state to {state_file}")
    try:
        apply_writes(plan, args.dry_run)
    except ClockError as e:
        raise ClockError(f"{e}\n(partly locked: `--mode unlock` restores from {state_file})") from None


def unlock(root: Path, soc: SocLayout, args: argparse.Namespace, state_file: Path) -> None:
    state = load_state(state_file)
    plan: list[Write] = []
    if state is not None:
        if state.get("soc") != soc.name:
            raise ClockError(f"{state_file} was written for {state.get('soc')}, this is {soc.name}")
        domains = {d.key: d for d in frequency_domains(root, soc, with_ddr=DDR_DEVFREQ in state["freq"])}
        for cpu, value in sorted(state.get("cpuidle", {}).items(), key=lambda kv: int(kv[0][3:])):
            plan.append(Write(root / CPU_DIR / cpu / "cpuidle" / "state1" / "disable", value))
        for key, saved in state["freq"].items():
            if key not in domains:
                raise ClockError(f"{state_file} names {key}, which this board does not have")
            plan += restore_writes(domains[key], saved)
        print(f"restoring the state saved in {state_file}")
    else:
        with_ddr = (root / DEVFREQ_DIR / DDR_DEVFREQ).is_dir()
        print(f"no state file {state_file}: restoring the usual on-demand governors")
        plan += [Write(p, "0") for p in cpuidle_disable_files(root) if read_text(p) == "1"]
        for d in frequency_domains(root, soc, with_ddr=with_ddr):
            plan += default_restore_writes(d)
    apply_writes(plan, args.dry_run)
    if state is not None:
        if args.dry_run:
            print(f"would remove {state_file}")
        else:
            state_file.unlink()


def npu_load(root: Path) -> str:
    for rel in NPU_LOAD_FILES:
        text = read_optional(root / rel)
        if text is not None:
            return text
    return "not readable (debugfs needs root: sudo cat /sys/kernel/debug/rknpu/load)"


def status(root: Path, soc: SocLayout, state_file: Path) -> None:
    """Print governors and frequencies; missing nodes are shown, not fatal."""
    print(f"SoC: {soc.name} ({soc.npu_cores} NPU cores)")
    nodes = [(f"cpu {p}", p, root / CPUFREQ_DIR / p, True) for p in soc.cpu_policies]
    try:
        npu = find_npu_devfreq(root, soc)
        nodes.append(("npu", npu.name, npu, False))
    except ClockError as e:
        print(f"npu: {e}")
    nodes.append(("ddr", DDR_DEVFREQ, root / DEVFREQ_DIR / DDR_DEVFREQ, False))
    for label, key, node, is_cpu in nodes:
        d = FreqDomain(label, key, node, is_cpu, ())
        if not node.is_dir():
            print(f"{label}: missing ({node})")
            continue
        governor = read_optional(d.governor_file)
        cur = read_optional(d.cur_freq_file)
        offered = (read_optional(d.frequencies_file) or "").split()
        line = f"{label} ({key}): governor={governor} cur={cur} {d.unit}"
        if governor == "userspace":
            line += f" locked={read_optional(d.setspeed_file)} {d.unit}"
        if offered:
            line += f" offered={offered[0]}..{offered[-1]} {d.unit}"
        print(line)
    idle = [(p.parent.parent.parent.name, read_optional(p)) for p in cpuidle_disable_files(root)]
    if idle:
        disabled = [cpu for cpu, v in idle if v == "1"]
        print(f"cpuidle state1 disabled on: {', '.join(disabled) if disabled else 'none'}")
    print(f"NPU load: {npu_load(root)}")
    if state_file.exists():
        print(f"state file: {state_file} (locked; --mode unlock restores it)")
    else:
        print(f"state file: none ({state_file})")


# ---------------------------------------------------------------------------- CLI


def _freq_arg(allow_skip: bool):
    def parse(text: str) -> str:
        if text == "max" or (allow_skip and text == "skip") or (text.isdigit() and int(text) > 0):
            return text
        accepted = "max, skip or a positive integer" if allow_skip else "max or a positive integer"
        raise argparse.ArgumentTypeError(f"{text!r}: expected {accepted}")

    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--soc", choices=("auto", *SOCS), default="auto", help="default: from the device tree")
    p.add_argument("--mode", choices=("lock", "unlock", "status"), default="status")
    p.add_argument("--dry-run", action="store_true", help="print every write (path and value), change nothing")
    p.add_argument("--sysfs-root", default="/", help="prefix for /sys, /proc and /run (tests use a fake tree)")
    p.add_argument("--state-file", default=None, help=f"default: <sysfs-root>/{DEFAULT_STATE_FILE}")
    p.add_argument("--cpu", type=_freq_arg(False), default="max", help="max or kHz offered by every policy")
    p.add_argument("--npu", type=_freq_arg(False), default="max", help="max or Hz")
    p.add_argument("--ddr", type=_freq_arg(True), default="max", help="max, Hz, or skip (leave DDR alone)")
    p.add_argument("--disable-cpuidle", action="store_true", help="also disable cpuidle state1 on every CPU")
    p.add_argument("--allow-non-root", action="store_true", help="skip the root check (fake trees in tests)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    root = Path(args.sysfs_root)
    state_file = Path(args.state_file) if args.state_file else root / DEFAULT_STATE_FILE
    try:
        if args.mode != "status" and not args.dry_run and not args.allow_non_root and os.geteuid() != 0:
            raise ClockError(f"--mode {args.mode} writes to sysfs: run as root (sudo), or use --dry-run")
        soc = SOCS[detect_soc(root) if args.soc == "auto" else args.soc]
        if args.mode == "lock":
            lock(root, soc, args, state_file)
        elif args.mode == "unlock":
            unlock(root, soc, args, state_file)
        else:
            status(root, soc, state_file)
    except ClockError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
