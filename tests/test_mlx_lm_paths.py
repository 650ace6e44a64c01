"""kvsim's policy caches on mlx-lm 0.32.2's own cache paths, driven through mlx-lm itself.

A tiny random llama (2 layers, no downloads) is saved to a local model folder with a word-level
tokenizer, so ``mlx_lm.utils.load``, ``stream_generate``, ``BatchGenerator``, ``LRUPromptCache``, the
server's handler/generator classes and the ``mlx_lm`` command line all run for real. Every policy is
compared with its mlx-lm equivalent: ``KVCache`` (step 256) for the plain ones, ``QuantizedKVCache``,
``RotatingKVCache``.
"""

from __future__ import annotations

import copy
import json
import pickle
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")
tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

import importlib  # noqa: E402

from mlx.utils import tree_flatten  # noqa: E402
from mlx_lm.models import cache as lm_cache  # noqa: E402
from mlx_lm.models.llama import Model, ModelArgs  # noqa: E402
from mlx_lm.utils import load  # noqa: E402

from policies import mlx as pmlx  # noqa: E402
from policies.mlx_install import install  # noqa: E402

lm_generate = importlib.import_module("mlx_lm.generate")  # the module (``mlx_lm.generate`` is also a function)
lm_server = importlib.import_module("mlx_lm.server")

CONFIG = {
    "model_type": "llama",
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "rms_norm_eps": 1e-5,
    "vocab_size": 101,
    "tie_word_embeddings": False,  # tied random embeddings just repeat the last token
}

PLAIN = [
    {"name": "step"},
    {"name": "lowpeak"},
    {"name": "prealloc", "max_size": 300},
    {"name": "geometric", "seed_rows": 48, "factor": 1.5},
    {"name": "full", "context_tokens": 600},
]
QUANT = {"name": "quantized", "bits": 8, "group_size": 64}
ROTATING = {"name": "rotating", "max_size": 300, "keep": 4}
ALL = [*PLAIN, QUANT, ROTATING]


def pid(policy: dict[str, Any]) -> str:
    return "-".join(str(v) for v in policy.values())


def mlx_lm_twin(policy: dict[str, Any]) -> Any:
    """The mlx-lm cache a policy must behave as."""
    if policy["name"] == "quantized":
        return lm_cache.QuantizedKVCache(group_size=policy["group_size"], bits=policy["bits"])
    if policy["name"] == "rotating":
        return lm_cache.RotatingKVCache(max_size=policy["max_size"], keep=policy["keep"])
    return lm_cache.KVCache()


def write_model_folder(folder: Path) -> None:
    """A loadable mlx-lm model folder: random llama weights, config.json and a word-level tokenizer."""
    mx.random.seed(7)
    model = Model(ModelArgs(**CONFIG))
    for layer in model.layers:  # sharper attention: tokens then depend on many cached rows
        layer.self_attn.q_proj.weight = layer.self_attn.q_proj.weight * 4
        layer.self_attn.k_proj.weight = layer.self_attn.k_proj.weight * 4
    mx.save_safetensors(str(folder / "model.safetensors"), dict(tree_flatten(model.parameters())))
    (folder / "config.json").write_text(json.dumps(CONFIG))
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, CONFIG["vocab_size"])}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.decoder = tokenizers.decoders.WordPiece(prefix="##")  # joins the words with spaces
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.save_pretrained(folder)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: Any) -> Path:
    folder = tmp_path_factory.mktemp("tiny-llama")
    write_model_folder(folder)
    return folder


@pytest.fixture(scope="module")
def loaded(model_dir: Path) -> tuple[Any, Any]:
    return load(str(model_dir))


def words(n: int, seed: int) -> str:
    """``n`` vocabulary words (ids 3..100), reproducibly."""
    return " ".join(f"w{(seed + 7 * i * i + 3 * i) % 98 + 3}" for i in range(n))


def same(a: Any, b: Any) -> bool:
    """Equal trees of arrays (shape, dtype, values) and plain values."""
    if isinstance(a, (tuple, list)):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, mx.array):
        return isinstance(b, mx.array) and a.shape == b.shape and a.dtype == b.dtype and bool(mx.array_equal(a, b))
    return bool(a == b)


def filled(model: Any, policy: dict[str, Any], tokens: int = 270, decode: int = 3) -> list[Any]:
    """A model's policy caches after a prefill of ``tokens`` and ``decode`` one-token steps (offsets cross 256)."""
    cache = pmlx.make_prompt_cache(model, policy=policy)
    ids = mx.array([(i * 13) % 98 + 3 for i in range(tokens + decode)])
    model(ids[None, :tokens], cache=cache)
    for t in range(decode):
        model(ids[None, tokens + t : tokens + t + 1], cache=cache)
    mx.eval([c.state for c in cache])
    return cache


# -- prompt-cache files ----------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ALL, ids=pid)
def test_save_load_keeps_state_and_policy_and_plain_mlx_lm_reads_it(
    loaded: Any, tmp_path: Path, policy: dict[str, Any]
) -> None:
    model, _ = loaded
    cache = filled(model, policy)
    pmlx.save_prompt_cache(tmp_path / "p", cache, {"note": "mine"})  # ".safetensors" appended, as mlx-lm's
    back, meta = pmlx.load_prompt_cache(tmp_path / "p.safetensors", return_metadata=True)
    assert meta == {"note": "mine"}
    for a, b in zip(cache, back):
        assert type(b) is type(a) and b.policy == a.policy and same(b.state, a.state)
    plain = lm_cache.load_prompt_cache(str(tmp_path / "p.safetensors"))  # mlx-lm itself, no kvsim code
    for a, b in zip(cache, plain):
        assert type(b) is type(mlx_lm_twin(policy)) and same(b.state, a.state)
    assert not list(tmp_path.glob(".*"))  # the temporary file is gone


@pytest.mark.parametrize("policy", ALL, ids=pid)
def test_mlx_lm_file_loads_into_the_policy(loaded: Any, tmp_path: Path, policy: dict[str, Any]) -> None:
    model, _ = loaded
    theirs = [mlx_lm_twin(policy) for _ in model.layers]
    ids = mx.array([(i * 5) % 98 + 3 for i in range(280)])
    model(ids[None], cache=theirs)
    lm_cache.save_prompt_cache(str(tmp_path / "lm.safetensors"), theirs)
    ours = pmlx.load_prompt_cache(tmp_path / "lm.safetensors", policy=policy)
    for a, b in zip(theirs, ours):
        assert b.policy_name == policy["name"] and same(b.state, a.state)
    with install(policy):  # mlx-lm's own loader, as `mlx_lm generate --prompt-cache-file` calls it
        installed = lm_generate.load_prompt_cache(str(tmp_path / "lm.safetensors"))
    assert [type(c) for c in installed] == [type(c) for c in ours]


def test_file_of_another_policy_or_version_is_refused(loaded: Any, tmp_path: Path) -> None:
    model, _ = loaded
    cache = filled(model, {"name": "lowpeak"}, tokens=20, decode=0)
    pmlx.save_prompt_cache(tmp_path / "low.safetensors", cache)
    with pytest.raises(ValueError, match=r"holds LowPeakPolicy.*not the policy asked for") as err:
        pmlx.load_prompt_cache(tmp_path / "low.safetensors", policy={"name": "step"})
    assert "\n" not in str(err.value)
    as_lm = [lm_cache.KVCache.from_state(c.state) for c in cache]
    lm_cache.save_prompt_cache(str(tmp_path / "v2.safetensors"), as_lm, {"kvsim_format": "2", "kvsim_policies": "[]"})
    with pytest.raises(ValueError, match=r"kvsim_format '2' is not a format this kvsim reads"):
        pmlx.load_prompt_cache(tmp_path / "v2.safetensors")
    lm_cache.save_prompt_cache(str(tmp_path / "raw.safetensors"), cache)  # mlx-lm's writer: our class names, no policy
    with pytest.raises(ValueError, match=r"class 'LowPeakKVCache' is not mlx-lm's.*policies.mlx.save_prompt_cache"):
        pmlx.load_prompt_cache(tmp_path / "raw.safetensors")
    with pytest.raises(ValueError, match=r"metadata.kvsim_format: reserved"):
        pmlx.save_prompt_cache(tmp_path / "x.safetensors", cache, {"kvsim_format": "1"})
    with pytest.raises(ValueError, match=r"caches\[0\]: a plain KVCache cannot become a .quantized. cache"):
        pmlx.convert_prompt_cache(as_lm, QUANT)


# -- copies, trims, quantization ---------------------------------------------------------------------


@pytest.mark.parametrize("policy", ALL, ids=pid)
def test_deepcopy_and_pickle_after_updates_then_continue(loaded: Any, policy: dict[str, Any]) -> None:
    model, _ = loaded
    cache = filled(model, policy, tokens=250, decode=2)
    copies = [copy.deepcopy(cache), pickle.loads(pickle.dumps(cache))]
    for other in copies:
        for a, b in zip(cache, other):
            assert type(b) is type(a) and b.policy == a.policy and same(b.state, a.state)
    ids = mx.array([[(i * 11) % 98 + 3 for i in range(20)]])
    outs = [model(ids, cache=c) for c in (cache, *copies)]  # 252 -> 272 rows: a growth in every copy
    assert all(same(o, outs[0]) for o in outs[1:])
    assert all(same(a.state, b.state) for other in copies for a, b in zip(cache, other))


@pytest.mark.parametrize("policy", [*PLAIN, QUANT], ids=pid)
def test_trim_prompt_cache_and_step_as_mlx_lm(loaded: Any, policy: dict[str, Any]) -> None:
    model, _ = loaded
    ours, theirs = filled(model, policy, tokens=40, decode=0), [mlx_lm_twin(policy) for _ in model.layers]
    model(mx.array([[(i * 13) % 98 + 3 for i in range(40)]]), cache=theirs)
    assert lm_cache.trim_prompt_cache(ours, 7) == lm_cache.trim_prompt_cache(theirs, 7) == 7
    assert [c.offset for c in ours] == [c.offset for c in theirs] == [33, 33]
    assert ours[0].step == getattr(ours[0].policy, "step_rows", None)
    if ours[0].step is not None:
        ours[0].step = 512
        assert ours[0].policy.step_rows == 512
    else:
        with pytest.raises(ValueError, match=r"step: policy .* has no step"):
            ours[0].step = 512


def test_to_quantized_through_generate_step_kv_bits(loaded: Any) -> None:
    model, _ = loaded
    prompt = mx.array([(i * 17) % 98 + 3 for i in range(120)])
    kw = {"max_tokens": 10, "kv_bits": 8, "kv_group_size": 64, "quantized_kv_start": 60}
    ours = pmlx.make_prompt_cache(model, policy={"name": "lowpeak"})
    theirs = lm_cache.make_prompt_cache(model)
    got = [t for t, _ in lm_generate.generate_step(prompt, model, prompt_cache=ours, **kw)]
    want = [t for t, _ in lm_generate.generate_step(prompt, model, prompt_cache=theirs, **kw)]
    assert got == want and all(type(c).__name__ == "QuantizedPolicyKVCache" for c in ours)
    with pytest.raises(NotImplementedError):
        pmlx.cache_for(ROTATING).to_quantized()


# -- generation and batching ---------------------------------------------------------------------------


def two_turns(model: Any, tokenizer: Any, cache: list[Any]) -> list[int]:
    """Two chat-like turns on one cache through ``stream_generate``; the second crosses 256 rows."""
    tokens = []
    for turn, (n_words, n_new) in enumerate(((200, 40), (30, 40))):
        for out in lm_generate.stream_generate(
            model, tokenizer, words(n_words, turn), max_tokens=n_new, prompt_cache=cache
        ):
            tokens.append(out.token)
    return tokens


@pytest.mark.parametrize("policy", ALL, ids=pid)
def test_two_turns_across_256_match_mlx_lm(loaded: Any, policy: dict[str, Any]) -> None:
    model, tokenizer = loaded
    with install(policy):
        ours = lm_cache.make_prompt_cache(model)  # mlx-lm's own factory builds the policy's caches
    assert all(c.policy_name == policy["name"] for c in ours)
    theirs = [mlx_lm_twin(policy) for _ in model.layers]
    assert two_turns(model, tokenizer, ours) == two_turns(model, tokenizer, theirs)
    assert ours[0].offset == theirs[0].offset > 256


def batch_run(
    model: Any, histories: list[list[Any]] | None, prompts: list[list[int]]
) -> tuple[dict[int, list[int]], dict[int, Any]]:
    """``BatchGenerator.insert(prompts, caches=histories)`` to the end; tokens and extracted caches per uid."""
    gen = lm_generate.BatchGenerator(model, max_tokens=12, prefill_step_size=64)
    uids = gen.insert(prompts, max_tokens=[12, 9], caches=histories)
    tokens: dict[int, list[int]] = {u: [] for u in uids}
    finished: dict[int, Any] = {}
    while len(finished) < len(uids):
        _, responses = gen.next()
        for r in responses:
            tokens[r.uid].append(r.token)
            if r.finish_reason is not None:
                finished[r.uid] = r.prompt_cache
    gen.close()
    return tokens, finished


@pytest.mark.parametrize("policy", [*PLAIN, ROTATING], ids=pid)
def test_batch_generator_with_history_keeps_the_policy(loaded: Any, policy: dict[str, Any]) -> None:
    model, _ = loaded
    prompts = [[(i * 3) % 98 + 3 for i in range(30)], [(i * 5) % 98 + 3 for i in range(9)]]

    def histories(make: Any) -> list[list[Any]]:
        made = []
        for n in (250, 120):  # one history crosses 256 rows while batched
            cache = make()
            model(mx.array([[(i * 7 + n) % 98 + 3 for i in range(n)]]), cache=cache)
            made.append(cache)
        return made

    ours, ours_caches = batch_run(model, histories(lambda: pmlx.make_prompt_cache(model, policy=policy)), prompts)
    theirs, theirs_caches = batch_run(model, histories(lambda: [mlx_lm_twin(policy) for _ in model.layers]), prompts)
    assert ours == theirs and all(len(t) > 0 for t in ours.values())
    for uid, caches in ours_caches.items():
        for a, b in zip(caches, theirs_caches[uid]):
            assert a.policy_name == policy["name"] and a.policy == pmlx.cache_for(policy).policy
            assert a.offset == b.offset and same(a.keys_and_values(), b.keys_and_values())


def staggered_run(model: Any, make: Any) -> tuple[list[list[int]], list[Any]]:
    """A second sequence joins a batch already decoding, so mlx-lm extends the batch caches."""
    gen = lm_generate.BatchGenerator(model, max_tokens=10, prefill_step_size=64)
    first = make()
    model(mx.array([[(i * 7) % 98 + 3 for i in range(250)]]), cache=first)
    uids = gen.insert([[5, 6, 7, 8]], caches=[first])
    tokens: dict[int, list[int]] = {}
    finished: dict[int, Any] = {}
    for step in range(40):
        if step == 3:
            uids += gen.insert([[(i * 3) % 98 + 3 for i in range(70)]], caches=[make()])
        for r in gen.next()[1]:
            tokens.setdefault(r.uid, []).append(r.token)
            if r.finish_reason is not None:
                finished[r.uid] = r.prompt_cache
        if len(finished) == len(uids) == 2:
            break
    gen.close()
    return [tokens[u] for u in uids], [finished[u] for u in uids]


@pytest.mark.parametrize("policy", [{"name": "lowpeak"}, {"name": "prealloc", "max_size": 300}, ROTATING], ids=pid)
def test_batch_generator_extends_a_running_batch(loaded: Any, policy: dict[str, Any]) -> None:
    model, _ = loaded
    ours, ours_caches = staggered_run(model, lambda: pmlx.make_prompt_cache(model, policy=policy))
    theirs, theirs_caches = staggered_run(model, lambda: [mlx_lm_twin(policy) for _ in model.layers])
    assert ours == theirs and all(len(t) == 10 for t in ours)
    for caches, twins in zip(ours_caches, theirs_caches):
        assert all(c.policy_name == policy["name"] and c.offset == t.offset for c, t in zip(caches, twins))
    batch = type(ours_caches[0][0]).merge([ours_caches[0][0]])
    plain = type(theirs_caches[0][0]).merge([theirs_caches[0][0]])
    with pytest.raises(ValueError, match=r"cannot extend with .*install one policy for all"):
        batch.extend(plain)


def test_quantized_history_is_refused_like_mlx_lm(loaded: Any) -> None:
    """mlx-lm's ``QuantizedKVCache`` has no ``merge``; the quantized policy cache is refused the same way."""
    model, _ = loaded
    for make in (
        lambda: pmlx.make_prompt_cache(model, policy=QUANT),
        lambda: [mlx_lm_twin(QUANT) for _ in model.layers],
    ):
        with pytest.raises(ValueError, match="does not yet support batching with history"):
            batch_run(model, [make(), make()], [[5, 6, 7], [8, 9]])


def test_merge_of_two_policies_is_refused() -> None:
    a, b = pmlx.cache_for({"name": "step"}), pmlx.cache_for({"name": "step", "step": 64})
    with pytest.raises(ValueError, match=r"caches\[1\]: a batch holds one policy"):
        type(a).merge([a, b])


# -- the server --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ALL, ids=pid)
def test_lru_prompt_cache_fetch_and_insert_as_the_server_does(loaded: Any, policy: dict[str, Any]) -> None:
    """``LRUPromptCache`` calls as the server makes them: insert, then fetch a longer prompt (deep copy) and a
    diverging one (deep copy and ``trim_prompt_cache``); the copies then run on, as the mlx-lm twin's do."""
    model, _ = loaded
    key, held = ("tiny", None, None), [(i * 13) % 98 + 3 for i in range(260)]
    longer, diverging = held + [7, 8, 9], held[:200] + [4, 5, 6]
    results = []
    for make in (
        lambda: pmlx.make_prompt_cache(model, policy=policy),
        lambda: [mlx_lm_twin(policy) for _ in model.layers],
    ):
        lru, cache = lm_cache.LRUPromptCache(max_size=4), make()
        model(mx.array([held]), cache=cache)
        lru.insert_cache(key, held, cache)
        assert lru.nbytes == sum(c.nbytes for c in cache) > 0
        fetched = [lru.fetch_nearest_cache(key, tokens) for tokens in (longer, diverging)]
        outs = [model(mx.array([rest]), cache=copy_) for copy_, rest in fetched if copy_ is not None]
        results.append(([rest for _, rest in fetched], [c is None for c, _ in fetched], outs, cache))
    (ours_rest, ours_none, ours_out, ours), (theirs_rest, theirs_none, theirs_out, _) = results
    assert ours_rest == theirs_rest and ours_none == theirs_none and ours_rest[0] == [7, 8, 9]
    assert all(same(a, b) for a, b in zip(ours_out, theirs_out))
    assert all(c.offset == 260 and c.policy_name == policy["name"] for c in ours)  # the entry itself is untouched


def serve_two_requests(model_dir: Path) -> tuple[list[dict[str, Any]], lm_cache.LRUPromptCache]:
    """mlx-lm's server (its ``ModelProvider``, ``ResponseGenerator`` and ``APIHandler``) on 127.0.0.1, two
    completions where the second extends the first, so it is served from the prompt cache; then stopped."""
    from http.server import ThreadingHTTPServer

    args = lm_server.argparse.Namespace(
        model=str(model_dir), adapter_path=None, draft_model=None, num_draft_tokens=3, trust_remote_code=False,
        chat_template="", use_default_chat_template=False, temp=0.0, top_p=1.0, top_k=0, min_p=0.0, max_tokens=16,
        chat_template_args={}, decode_concurrency=4, prompt_concurrency=2, prefill_step_size=64, prompt_cache_size=10,
        prompt_cache_bytes=None, kv_bits=None, kv_group_size=64, quantized_kv_start=0, pipeline=False,
        allowed_origins="*", host="127.0.0.1", port=0, log_level="WARNING",
    )  # fmt: skip
    lru = lm_cache.LRUPromptCache(args.prompt_cache_size)
    generator = lm_server.ResponseGenerator(lm_server.ModelProvider(args), lru)
    httpd = ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a, **k: lm_server.APIHandler(generator, *a, system_fingerprint="test", **k)
    )
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1/completions"
    replies = []
    try:
        first = words(240, 1)
        for prompt in (first, first + " " + words(40, 2)):  # the second request crosses 256 rows
            body = json.dumps({"prompt": prompt, "max_tokens": 12, "temperature": 0.0}).encode()
            request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as reply:
                replies.append(json.loads(reply.read()))
    finally:
        httpd.shutdown()
        httpd.server_close()
        generator.stop_and_join()
    return replies, lru


def test_server_reuses_its_prompt_cache_with_the_policy(model_dir: Path) -> None:
    with install({"name": "lowpeak"}):
        ours, lru = serve_two_requests(model_dir)
    theirs, plain_lru = serve_two_requests(model_dir)
    assert [r["choices"][0]["text"] for r in ours] == [r["choices"][0]["text"] for r in theirs]
    cached = [r["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0) for r in ours]
    assert cached[0] == 0 and cached[1] >= 240  # fetched (deep-copied, trimmed) from the LRU cache
    entries = [e for _, e in _lru_entries(lru)]
    assert entries and all(type(c).__name__ == "LowPeakKVCache" for e in entries for c in e.prompt_cache)
    assert lru.nbytes == sum(c.nbytes for e in entries for c in e.prompt_cache) > 0
    assert all(type(c) is lm_cache.KVCache for _, e in _lru_entries(plain_lru) for c in e.prompt_cache)


def _lru_entries(lru: lm_cache.LRUPromptCache) -> list[tuple[Any, Any]]:
    """The (model, tokens) keys in LRU order with their entries."""
    return [(key, lru._trie.get(*key)) for order in lru._lru._lrus.values() for key in order]


# -- the command line ----------------------------------------------------------------------------------------


def test_mlx_lm_commands_run_under_the_policy(model_dir: Path, tmp_path: Path) -> None:
    """``cache_prompt`` under lowpeak writes a lowpeak file; ``generate`` reads it under lowpeak and in plain
    mlx-lm, with the same text."""
    run = [sys.executable, "-m", "policies.mlx_lm_run", "--policy", "lowpeak", "--"]
    file = str(tmp_path / "prompt.safetensors")
    common = ["--model", str(model_dir)]
    done = subprocess.run([*run, "cache_prompt", *common, "--prompt", words(260, 3), "--prompt-cache-file", file],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert all(c.policy_name == "lowpeak" and c.offset == 260 for c in pmlx.load_prompt_cache(file))
    ask = ["generate", *common, "--prompt", words(5, 4), "--max-tokens", "8", "--prompt-cache-file", file]
    texts = []
    for cmd in ([*run, *ask], [sys.executable, "-m", "mlx_lm", *ask]):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        texts.append(done.stdout.split("==========")[1].strip())
    assert texts[0] == texts[1] and len(texts[0].split()) == 8


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--policy", "nope", "--", "generate"], "policy.name: unknown policy"),
        (["--policy", '{"name": "step", "step": 0}', "--", "generate"], "policy.step: must be >= 1, got 0"),
        (["--policy", '{"name": ', "--", "generate"], "policy: is not valid JSON"),
        (["--policy", "full", "--", "generate"], "policy.context_tokens"),
        (["--policy", "lowpeak"], "give the mlx-lm command after --"),
    ],
)
def test_mlx_lm_run_bad_input_is_one_line_exit_2(argv: list[str], match: str, capsys: Any) -> None:
    from policies.mlx_lm_run import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1


def test_install_restores_mlx_lm_and_refuses_nesting() -> None:
    original = lm_generate.make_prompt_cache
    with install({"name": "step"}):
        assert lm_generate.make_prompt_cache is not original
        with pytest.raises(ValueError, match="already installed"):
            install({"name": "lowpeak"})
    assert lm_generate.make_prompt_cache is original and lm_server.make_prompt_cache is lm_cache.make_prompt_cache
