"""Code that runs *inside* the sandbox: the zygote, the candidate's function server, the checker and the
wire format between them. Standard library only, since the sandboxed interpreter sees no site-packages.

The parent (``rewards/sandbox_pool.py``) sends these modules' source to a fresh interpreter started
with ``python -I -S``, which loads them with ``BOOT`` as a package named ``jail``. They are also ordinary
modules of rlxf, so the wire format and the checker are unit-tested in-process.
"""

from pathlib import Path

# dependency order: each module imports only those before it
MODULES = ("wire", "kernel", "serve", "check", "view", "zygote")

BOOT = r"""
import json, sys, types
cfg = json.loads(sys.stdin.buffer.read().decode("utf-8"))
package = types.ModuleType("jail")
package.__path__ = []
sys.modules["jail"] = package
for name, source in cfg.pop("sources"):
    module = types.ModuleType("jail." + name)
    module.__package__ = "jail"
    sys.modules[module.__name__] = module
    exec(compile(source, "jail/" + name + ".py", "exec"), module.__dict__)
    setattr(package, name, module)
sys.modules["jail.zygote"].main(cfg)
"""


def sources() -> list[tuple[str, str]]:
    here = Path(__file__).parent
    return [(name, (here / f"{name}.py").read_text(encoding="utf-8")) for name in MODULES]
