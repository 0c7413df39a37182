"""Package import: the XLA CPU flag approxcv sets (see ``approxcv._single_threaded_eigen``)."""
import os
import subprocess
import sys

SCRIPT = "import os, approxcv; print(os.environ['XLA_FLAGS'])"


def _flags_after_import(env_flags):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if env_flags is not None:
        env["XLA_FLAGS"] = env_flags
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, check=True)
    return out.stdout.strip()


def test_import_turns_off_the_multithreaded_eigen_pool_and_keeps_other_flags():
    assert _flags_after_import(None) == "--xla_cpu_multi_thread_eigen=false"
    assert _flags_after_import("--xla_force_host_platform_device_count=2") == (
        "--xla_force_host_platform_device_count=2 --xla_cpu_multi_thread_eigen=false")


def test_a_users_own_choice_of_the_flag_is_kept():
    assert _flags_after_import("--xla_cpu_multi_thread_eigen=true") == (
        "--xla_cpu_multi_thread_eigen=true")
