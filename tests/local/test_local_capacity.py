"""The local cluster's warning when a job asks for more than this machine has, and its advice."""

from __future__ import annotations

from pathlib import Path

from paijob.local import capacity
from paijob.render.templating import render_template

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LAPTOP = capacity.Machine(gpus=0, cpus=2, memory_mb=7680)  # a 2-core, "8 GB" laptop: less than 8192 MB usable


def asked(job: dict) -> list[tuple[int, int, int, int]]:
    """(instances, gpu, cpu, memoryMB) per role, as the runner passes them."""
    return [(role["instances"], role["resourcePerInstance"]["gpu"], role["resourcePerInstance"]["cpu"],
             role["resourcePerInstance"]["memoryMB"]) for role in job["taskRoles"].values()]


def test_the_readme_laptop_example_fits_a_two_core_eight_gb_laptop() -> None:
    job = render_template("ddp", [EXAMPLES / "cifar10-local.values.yaml"]).job
    assert capacity.warnings(asked(job), LAPTOP) == []


def test_the_advice_names_only_what_exceeds() -> None:
    lines = capacity.warnings([(2, 0, 2, 2048)], LAPTOP)  # already 2 instances and gpu 0: only cpu is too much
    assert lines[0] == "the job asks for 4 CPU core(s) in all (2 task(s) × cpu 2), this machine has 2"
    advice = lines[-1].split("to fit this machine: ", 1)[1]
    assert advice.startswith("--set cpu=1 (")
    assert "instances=" not in advice and "gpu=" not in advice and "memoryMB=" not in advice


def test_the_advice_fits_every_value_that_exceeds() -> None:
    lines = capacity.warnings([(4, 8, 48, 393216)], LAPTOP)
    assert "32 GPU(s) in all (4 task(s) × gpu 8)" in lines[0]
    assert "192 CPU core(s) in all (4 task(s) × cpu 48)" in lines[1]
    assert "1572864 MB of memory in all (4 task(s) × memoryMB 393216), this machine has 7680 MB" in lines[2]
    advice = lines[-1].split("to fit this machine: ", 1)[1]
    assert advice.startswith("--set instances=2 --set gpu=0 --set cpu=1 --set memoryMB=3840 (")
    fitted = capacity.warnings([(2, 0, 1, 3840)], LAPTOP)
    assert fitted == []  # following the advice silences the warning


def test_several_roles_are_told_the_task_count_that_fits() -> None:
    lines = capacity.warnings([(2, 1, 1, 100), (1, 0, 1, 100)], LAPTOP)
    assert "2 GPU(s) in all (2 task(s) × gpu 1)" in lines[0]
    assert "3 CPU core(s) in all (2 task(s) × cpu 1 + 1 task(s) × cpu 1)" in lines[1]
    assert "--set gpu=0 --set cpu=1, and at most 2 task(s) in all" in lines[-1]


def test_a_job_that_fits_gets_no_warning() -> None:
    assert capacity.warnings([(2, 0, 1, 2048)], LAPTOP) == []
    assert capacity.warnings([], LAPTOP) == []


def ask(instances: int, gpu: int = 0, cpu: int = 1, memory_mb: int = 256, ports: int = 3) -> capacity.Ask:
    return capacity.Ask("worker", instances, gpu, cpu, memory_mb, ports)


def test_the_repos_cluster_sized_examples_are_warned_about_on_a_laptop_not_refused() -> None:
    for name in ("ddp-4x8", "apex-2x4", "horovod-2x4"):
        job = render_template(name.split("-")[0], [EXAMPLES / f"{name}.values.yaml"]).job
        asks = [capacity.Ask(role, *ask_) for role, ask_ in zip(job["taskRoles"], asked(job), strict=True)
                for ask_ in [(*ask_, 3)]]
        assert capacity.refusals(asks, LAPTOP) == [], name


def test_what_a_machine_can_never_host_is_refused_saying_what_and_how_much() -> None:
    (tasks,) = capacity.refusals([ask(100_000, cpu=0, memory_mb=0, ports=0)], LAPTOP)
    assert tasks == ("100000 task(s) (worker: 100000), while this machine starts at most 64 at once "
                     "(32 per CPU core, 2 core(s))")
    (ports,) = capacity.refusals([ask(2, ports=3000)], LAPTOP)
    assert ports == "6000 port(s) in all (worker: 2 task(s) × 3000), at most 4096"
    (cpu,) = capacity.refusals([ask(1, cpu=600)], LAPTOP)
    assert cpu == "600 CPU core(s) in all (worker: 1 task(s) × 600), at most 256 × this machine's 2 = 512"
    (memory,) = capacity.refusals([ask(1, memory_mb=10**7)], LAPTOP)
    assert memory.startswith("10000000 MB of memory in all") and memory.endswith("= 1966080 MB")
    (gpu,) = capacity.refusals([ask(1, gpu=100_000)], LAPTOP)  # no GPU: each becomes a CPU process
    assert gpu.endswith("at most 256 × this machine's 2 CPU core(s), no GPU = 512")
    assert capacity.refusals([ask(1, gpu=600)], capacity.Machine(gpus=4, cpus=2, memory_mb=7680)) == []
