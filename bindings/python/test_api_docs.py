"""Every public name of the package (vpmm, vpmm.torch, vpmm.cupy, the
torch_memory_saver drop-in) has a docstring and type hints on all its
parameters and its return. Read from the source (ast), so the framework
modules are checked without PyTorch or CuPy installed."""
import ast
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = [os.path.join(HERE, "vpmm", f) for f in sorted(os.listdir(os.path.join(HERE, "vpmm")))
         if f.endswith(".py")]
TMS = os.path.join(HERE, "compat", "torch_memory_saver")
FILES += [os.path.join(TMS, f) for f in sorted(os.listdir(TMS)) if f.endswith(".py")]


def public(name):
    return not name.startswith("_") or name in ("__init__", "__enter__", "__exit__")


def problems(path):
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    out = []
    if not ast.get_docstring(tree):
        out.append("module docstring")

    def check_fn(fn, where, method):
        if not public(fn.name):
            return
        dunder = fn.name.startswith("__")
        setter = any(isinstance(d, ast.Attribute) and d.attr == "setter" for d in fn.decorator_list)
        if not dunder and not setter and not ast.get_docstring(fn):  # a setter shares its getter's
            out.append(f"{where}{fn.name}: no docstring")
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        if method and args:
            args = args[1:]  # self / cls
        for a in args + [x for x in (fn.args.vararg, fn.args.kwarg) if x]:
            if a.annotation is None:
                out.append(f"{where}{fn.name}: parameter {a.arg} has no type hint")
        if fn.returns is None and fn.name != "__init__":
            out.append(f"{where}{fn.name}: no return type hint")

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            check_fn(node, "", False)
        elif isinstance(node, ast.ClassDef) and public(node.name):
            if not ast.get_docstring(node):
                out.append(f"class {node.name}: no docstring")
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in item.decorator_list)
                    check_fn(item, f"{node.name}.", not static)
    return out


class PublicNamesAreDocumented(unittest.TestCase):
    def test_docstrings_and_type_hints(self):
        self.assertGreaterEqual(len(FILES), 9)
        bad = {os.path.relpath(p, HERE): problems(p) for p in FILES}
        bad = {k: v for k, v in bad.items() if v}
        self.assertEqual(bad, {}, "\n".join(f"{k}: {x}" for k, v in bad.items() for x in v))


if __name__ == "__main__":
    sys.exit(unittest.main(verbosity=2))
