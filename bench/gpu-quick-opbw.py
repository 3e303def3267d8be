# Effective bandwidth per memory-bound op of a tp-run profile: the bytes its record names / its median time.
import json, sys, statistics, collections
p = json.load(open(sys.argv[1]))
rows = collections.defaultdict(list)
for o in p['ops']:
    if o['kind'] in ('gemm', 'attention') or 'time_us' not in o: continue
    t = o['time_us'].get('median') if isinstance(o['time_us'], dict) else None
    b = o['op'].get('bytes', 0)
    fn = o['op'].get('fn', o['kind'])
    if not t: continue
    rows[(o['kind'], fn, o['phase'])].append((b, t))
print(f"{'kind':12} {'fn':22} {'phase':9} {'n':>3} {'MiB':>8} {'us':>9} {'TB/s':>6}")
for k, v in sorted(rows.items()):
    b = sum(x for x, _ in v); t = sum(y for _, y in v)
    print(f"{k[0]:12} {k[1]:22} {k[2]:9} {len(v):3d} {b/2**20/len(v):8.1f} {t/len(v):9.1f} {b/t/1e6 if b else 0:6.2f}")
print('compute_wall_us', p.get('compute_wall_us'))
