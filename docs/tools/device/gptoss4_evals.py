import json, sys, os
sys.path.insert(0, 'docs/tools')
from eval_diff import real_evals
from kvsim.generation.config import load_model_config
cfg = dict(load_model_config('gpt-oss-20b').config)
cfg['num_hidden_layers'] = 4
if isinstance(cfg.get('layer_types'), list): cfg['layer_types'] = cfg['layer_types'][:4]
out = {}
for p in (2049, 8192):
    rows, overall = real_evals('gpt-oss-20b', cfg, p, 2048, 2)
    out[p] = {'overall': overall, 'rows': rows}
    print('evals', p, overall, rows[:5], flush=True)
json.dump({'config': cfg, 'runs': out}, open(os.environ['OUT'] + '/gptoss4.json', 'w'))
