"""Render the kernel instantiations (one translation unit per schedule) and the dispatch chain.

    python codegen/generate.py --out DIR [--schedules "a;b" | all] [--rules FILE;...] [--list]

Output goes to DIR only, in sorted order, each file rewritten only when its text changes, so the
same rules give byte-identical files and unchanged files keep their timestamps. --schedules builds
a subset (for development): rules naming a schedule left out are dropped, and the last rule kept
becomes the catch-all; it may also name a family's candidate schedules, which are compiled (for
measuring) but reached only by name; "all" compiles every candidate (for the tuner), "<family>:all"
every candidate of one family, "<family>" the schedules its rules name and "default" the
schedules every family's rules name. --rules takes a family's rules
from another rules file (default: codegen/rules/<family>.json). --list prints the files that would
be written, one per line.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import jinja2

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from codegen.schedules import FAMILIES, Family, Rule, with_rules  # noqa: E402

#: per family kind: (kernel template, C++ argument struct, C++ launcher type)
KINDS = {"mixed_input": ("mm_mixed_input.cu.j2", "MixedInputMmArgs", "MixedInputMmLaunchFn"),
         "sm80_mixed_input": ("mm_sm80_mixed_input.cu.j2", "MixedInputMmArgs", "MixedInputMmLaunchFn"),
         "scaled_mm": ("scaled_mm.cu.j2", "ScaledMmArgs", "ScaledMmLaunchFn"),
         "block_scaled_mm": ("block_scaled_mm.cu.j2", "BlockScaledMmArgs", "BlockScaledMmLaunchFn")}
KERNELS_DIR = ROOT / "kernels"
DISPATCH_TEMPLATE = ROOT / "codegen" / "templates" / "dispatch.cpp.j2"


@dataclass(frozen=True)
class ChainLink:
    name: str
    condition: str  # C++ condition, "" for the catch-all


def _condition(rule: Rule) -> str:
    parts = [f"{var} <= {bound}" for var, bound in (("M", rule.m_max), ("N", rule.n_max), ("K", rule.k_max))
             if bound is not None]
    return " && ".join(parts)


def _chain(family: Family, built: set[str]) -> list[ChainLink]:
    rules = [r for r in family.rules if r.schedule.name(family.name) in built]
    if not rules:
        raise SystemExit(f"generate.py: no schedule of family {family.name} is selected")
    links = [ChainLink(r.schedule.name(family.name), _condition(r)) for r in rules]
    links[-1] = ChainLink(links[-1].name, "")
    # anything after the first catch-all is unreachable, and a link just before a catch-all of the
    # same schedule is redundant
    links = links[: next(i for i, link in enumerate(links) if not link.condition) + 1]
    while len(links) > 1 and links[-2].name == links[-1].name:
        del links[-2]
    return links


def families(rules_files: list[Path] | None = None) -> list[Family]:
    """The families, each with its rules from `rules_files` where one of them is for it."""
    out = list(FAMILIES)
    for path in rules_files or []:
        try:
            name = json.loads(Path(path).read_text())["family"]
        except (OSError, ValueError, KeyError) as e:
            raise SystemExit(f"generate.py: cannot read rules file {path}: {e}")
        if name not in [f.name for f in out]:
            raise SystemExit(f"generate.py: {path}: no family {name!r}; known: {[f.name for f in out]}")
        out = [with_rules(f, path) if f.name == name else f for f in out]
    return out


def default_schedule_names(fams: list[Family] | None = None) -> list[str]:
    return sorted(s.name(f.name) for f in (fams or FAMILIES) for s in f.schedules())


def all_schedule_names(fams: list[Family] | None = None) -> list[str]:
    return sorted(s.name(f.name) for f in (fams or FAMILIES) for s in f.all_schedules())


def render(selected: list[str] | None = None, rules_files: list[Path] | None = None) -> dict[str, str]:
    """File name -> text of every generated file. `selected`: schedule names, or ["all"]."""
    fams = families(rules_files)
    problems = [p for f in fams for p in f.problems()]
    if problems:
        raise SystemExit("generate.py: malformed rules:\n  " + "\n  ".join(problems))
    known = set(all_schedule_names(fams))
    if selected == ["all"]:
        selected = sorted(known)
    by_name = {f.name: f for f in fams}
    wanted = set()
    for item in selected or ["default"]:
        if item == "default":
            wanted |= set(default_schedule_names(fams))
        elif item.removesuffix(":all") in by_name:
            fam = by_name[item.removesuffix(":all")]
            wanted |= {sched.name(fam.name) for sched in
                       (fam.all_schedules() if item.endswith(":all") else fam.schedules())}
        elif item.endswith(":all"):
            raise SystemExit(f"generate.py: no family {item[:-4]!r}; known: {list(by_name)}")
        else:
            wanted.add(item)
    unknown = wanted - known
    if unknown:
        raise SystemExit(f"generate.py: unknown schedules {sorted(unknown)}; known: {sorted(known)}")

    env = jinja2.Environment(loader=jinja2.FileSystemLoader([str(KERNELS_DIR), str(DISPATCH_TEMPLATE.parent)]),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    files: dict[str, str] = {}
    rendered = []
    for family in fams:
        built = [s for s in family.all_schedules() if s.name(family.name) in wanted]
        if not built:
            continue
        template, args, launch_fn = KINDS[family.kind]
        kernel = env.get_template(template)
        entries = [dict(name=s.name(family.name), schedule=s) for s in built]
        for e in entries:
            files[f"mm_{e['name']}.cu"] = kernel.render(name=e["name"], schedule=e["schedule"], family=family)
        rendered.append(dict(name=family.name, kind=family.kind, args=args, launch_fn=launch_fn, built=entries,
                             chain=_chain(family, {e["name"] for e in entries})))
    files["dispatch.cpp"] = env.get_template(DISPATCH_TEMPLATE.name).render(families=rendered)
    return dict(sorted(files.items()))


def write(out: Path, files: dict[str, str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = out / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--schedules", default="",
                        help="';'-separated schedule names, or all (default: the schedules the rules name)")
    parser.add_argument("--rules", default="", help="';'-separated rules files (default: codegen/rules/)")
    parser.add_argument("--list", action="store_true", help="print the files, write nothing")
    args = parser.parse_args(argv)
    selected = [s for s in args.schedules.replace(",", ";").split(";") if s.strip()]
    rules = [Path(r.strip()) for r in args.rules.split(";") if r.strip()]
    files = render([s.strip() for s in selected], rules)
    if args.list:
        print("\n".join(str(args.out / name) for name in files))
    else:
        write(args.out, files)
    return 0


if __name__ == "__main__":
    sys.exit(main())
