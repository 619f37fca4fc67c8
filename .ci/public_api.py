"""The public surface of the `shmrc` crate, one line per item, from rustdoc's JSON
(nightly `--output-format json --document-hidden-items`), for `.ci/public-api`.

Every public path is listed: modules, types, functions with their signatures, fields,
variants, associated items, and the traits each type implements (not the auto traits
and blanket impls rustdoc synthesizes). Items hidden from the docs (`#[doc(hidden)]`)
are public API all the same and are marked `#[doc(hidden)]`. An item reachable by more
than one path (a module's and a re-export at the root) has its members listed under
the first path met, breadth first from the root, and each other path as an alias.

Usage: python3 .ci/public_api.py target/doc/shmrc.json > public-api.txt
"""

import json
import sys

data = json.load(open(sys.argv[1]))
index = data["index"]


def item(i):
    return index.get(str(i))


def hidden(it):
    for attr in it.get("attrs", []):
        text = attr if isinstance(attr, str) else json.dumps(attr)
        if "doc(hidden)" in text.replace(" ", "") or '"hidden"' in text:
            return True
    return False


def args(a):
    if not a:
        return ""
    if "angle_bracketed" in a:
        parts = []
        for arg in a["angle_bracketed"]["args"]:
            if "type" in arg:
                parts.append(ty(arg["type"]))
            elif "lifetime" in arg:
                parts.append(arg["lifetime"])
            elif "const" in arg:
                parts.append(str(arg["const"].get("expr", "_")))
            else:
                parts.append("_")
        for c in a["angle_bracketed"].get("constraints", []):
            binding = c.get("binding", {})
            if "equality" in binding and "type" in binding["equality"]:
                parts.append(f"{c['name']} = {ty(binding['equality']['type'])}")
            else:
                parts.append(c["name"])
        return "<" + ", ".join(parts) + ">" if parts else ""
    if "parenthesized" in a:
        p = a["parenthesized"]
        out = "(" + ", ".join(ty(t) for t in p["inputs"]) + ")"
        return out + (" -> " + ty(p["output"]) if p.get("output") else "")
    return ""


def bounds(bs):
    out = []
    for b in bs:
        if "trait_bound" in b:
            t = b["trait_bound"]["trait"]
            out.append(t["path"] + args(t.get("args")))
        elif "outlives" in b:
            out.append(b["outlives"])
        else:
            out.append("_")
    return " + ".join(out)


def ty(t):
    if t is None:
        return "()"
    (kind, v), = t.items()
    if kind == "resolved_path":
        return v["path"] + args(v.get("args"))
    if kind == "generic":
        return v
    if kind == "primitive":
        return v
    if kind == "borrowed_ref":
        life = (v["lifetime"] + " ") if v.get("lifetime") else ""
        return "&" + life + ("mut " if v["is_mutable"] else "") + ty(v["type"])
    if kind == "raw_pointer":
        return ("*mut " if v["is_mutable"] else "*const ") + ty(v["type"])
    if kind == "slice":
        return "[" + ty(v) + "]"
    if kind == "array":
        return "[" + ty(v["type"]) + "; " + v["len"] + "]"
    if kind == "tuple":
        return "(" + ", ".join(ty(x) for x in v) + ")"
    if kind == "impl_trait":
        return "impl " + bounds(v)
    if kind == "dyn_trait":
        return "dyn " + " + ".join(p["trait"]["path"] + args(p["trait"].get("args")) for p in v["traits"])
    if kind == "qualified_path":
        trait = v.get("trait")
        return f"<{ty(v['self_type'])} as {trait['path'] if trait else '?'}>::{v['name']}"
    if kind == "function_pointer":
        sig = v["sig"]
        return "fn(" + ", ".join(ty(x[1]) for x in sig["inputs"]) + ")" + (
            " -> " + ty(sig["output"]) if sig.get("output") else ""
        )
    return kind


def generics(g):
    params = []
    for p in g.get("params", []):
        kind = p["kind"]
        if "lifetime" in kind:
            params.append(p["name"])
        elif "type" in kind:
            b = bounds(kind["type"].get("bounds", []))
            if kind["type"].get("is_synthetic"):
                continue
            d = kind["type"].get("default")
            params.append(p["name"] + (": " + b if b else "") + (" = " + ty(d) if d else ""))
        elif "const" in kind:
            params.append("const " + p["name"] + ": " + ty(kind["const"]["type"]))
    return "<" + ", ".join(params) + ">" if params else ""


def signature(f):
    sig = f["sig"]
    header = f["header"]
    prefix = ("const " if header["is_const"] else "") + ("async " if header["is_async"] else "")
    prefix += "unsafe " if header["is_unsafe"] else ""
    inputs = []
    for name, t in sig["inputs"]:
        inputs.append("self" if name == "self" and t == {"generic": "Self"} else f"{name}: {ty(t)}")
    out = sig.get("output")
    return prefix + "fn", generics(f["generics"]) + "(" + ", ".join(inputs) + ")" + (
        " -> " + ty(out) if out else ""
    )


lines = []
seen = {}


def emit(path, it, kind, rest="", hid=False):
    lines.append(f"pub {kind} {path}{rest}" + ("  #[doc(hidden)]" if hid else ""))


def members(path, it, hid):
    inner = it["inner"]
    (kind, v), = inner.items()
    if kind == "struct":
        k = v["kind"]
        fields = k.get("plain", {}).get("fields", []) if isinstance(k, dict) else []
        if isinstance(k, dict) and "tuple" in k:
            fields = [f for f in k["tuple"] if f is not None]
        for fid in fields:
            f = item(fid)
            if f and f["visibility"] == "public":
                emit(f"{path}::{f['name']}", f, "field", ": " + ty(f["inner"]["struct_field"]), hid or hidden(f))
    if kind == "enum":
        for vid in v["variants"]:
            var = item(vid)
            emit(f"{path}::{var['name']}", var, "variant", "", hid or hidden(var))
    if kind in ("struct", "enum", "union"):
        for iid in v.get("impls", []):
            impl = item(iid)
            if impl is None:
                continue
            im = impl["inner"]["impl"]
            if im.get("is_synthetic") or im.get("blanket_impl"):
                continue
            if im.get("trait"):
                t = im["trait"]
                neg = "!" if im.get("is_negative") else ""
                lines.append(f"impl {neg}{t['path']}{args(t.get('args'))} for {path}{generics(im['generics'])}")
                continue
            for mid in im["items"]:
                m = item(mid)
                if m is None or m["visibility"] != "public":
                    continue
                assoc(f"{path}::{m['name']}", m, hid or hidden(m) or hidden(impl))
    if kind == "trait":
        for mid in v["items"]:
            m = item(mid)
            if m:
                assoc(f"{path}::{m['name']}", m, hid or hidden(m))


def assoc(path, m, hid):
    (kind, v), = m["inner"].items()
    if kind == "function":
        word, sig = signature(v)
        emit(path, m, word, sig, hid)
    elif kind == "assoc_const":
        emit(path, m, "const", ": " + ty(v["type"]), hid)
    elif kind == "assoc_type":
        emit(path, m, "type", "", hid)
    else:
        emit(path, m, kind, "", hid)


queue = [("shmrc", data["root"], False)]
while queue:
    path, iid, hid = queue.pop(0)
    it = item(iid)
    if it is None:
        continue
    hid = hid or hidden(it)
    (kind, v), = it["inner"].items()
    if kind == "module":
        if path != "shmrc":
            emit(path, it, "mod", "", hid)
        children = []
        for cid in v["items"]:
            c = item(cid)
            if c is None or c["visibility"] != "public":
                continue
            (ck, cv), = c["inner"].items()
            if ck == "use":
                if cv.get("is_glob"):
                    lines.append(f"pub use {path}::* = {cv['source']}")
                    continue
                target = item(cv["id"]) if cv.get("id") is not None else None
                if target is None:
                    emit(f"{path}::{cv['name']}", c, "use", f" = {cv['source']}", hid or hidden(c))
                    continue
                children.append((f"{path}::{cv['name']}", cv["id"], hid or hidden(c)))
            elif ck == "impl":
                continue
            else:
                children.append((f"{path}::{c['name']}", cid, hid))
        queue.extend(children)
        continue
    if str(iid) in seen:
        emit(path, it, kind.replace("_", " "), f" = {seen[str(iid)]}", hid)
        continue
    seen[str(iid)] = path
    if kind == "function":
        word, sig = signature(v)
        emit(path, it, word, sig, hid)
    elif kind in ("struct", "enum", "union", "trait"):
        g = generics(v.get("generics", {}))
        emit(path, it, kind, g, hid)
        members(path, it, hid)
    elif kind == "type_alias":
        emit(path, it, "type", generics(v["generics"]) + " = " + ty(v["type"]), hid)
    elif kind in ("constant", "static"):
        t = v.get("type")
        emit(path, it, "const" if kind == "constant" else "static", ": " + ty(t) if t else "", hid)
    elif kind in ("macro", "proc_macro"):
        emit(path, it, "macro", "", hid)
    else:
        emit(path, it, kind, "", hid)

print(f"# The public API of shmrc {data.get('crate_version') or ''}, features "
      f"{sys.argv[2] if len(sys.argv) > 2 else '(default)'}: written by .ci/public-api.")
print("# A change here is a change to what users can name: review it, then rewrite this")
print("# file with `bash .ci/public-api --bless`.")
for line in sorted(set(lines)):
    print(line)
