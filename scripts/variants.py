# The variants the interleaving scripts (bench_ab.py, idle_cpu.py) compare:
# each argument is label=BINARY[:ENV=V,ENV=V].
def parse(specs):
    variants = []
    for spec in specs:
        label, rest = spec.split("=", 1)
        parts = rest.split(":", 1)
        env = dict(kv.split("=", 1) for kv in parts[1].split(",")) if len(parts) > 1 and parts[1] else {}
        variants.append((label, parts[0], env))
    return variants
