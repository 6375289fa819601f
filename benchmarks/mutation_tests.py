"""Which tests each package and module of gpu_launch/ is mutated against (benchmarks/mutation.py): the
direct tests first, the fastest killers first; a module may add its own in MODULE_TESTS."""

from __future__ import annotations

__all__ = ["TESTS", "MODULE_TESTS"]

def _tests(names: str) -> list[str]:
    return [f"tests/test_{name}.py" for name in names.split()]


# The tests for each package, fastest killers first; a module may add its own in MODULE_TESTS.
_RESERVATIONS = _tests("lock_edges reservation_pins reservations lock_ownership hardened_locks locks_at_every_depth "
                       "bad_lock_files nesting queue wait each_scheduling hostile")
_CHOOSE = _tests("choice_edges choice_boundaries model_shortfall_lines select spec ranking choice_states mig visibility "
                 "machine_states explain choose_by_model cli api")
_FIT = _tests("engine_flag_edges sizing_edges fit_kv fit_kv_families fit_kv_vllm fit_plan plan_engine_flags "
              "engine_flags nodes_plan plan_cli choose_by_model")
_MODELFILE = _tests("modelfile_edges modelfile_limits modelfile_gguf modelfile_safetensors modelfile_hostile "
                    "fit_kv_families fit_kv_vllm plan_cli")
_CLUSTER = _tests("cluster_edges nodes_submission each_slurm nodes node_flags nodes_slurm nodes_netns")
_JOBS = _tests("jobs_edges supervisor_edges job_supervisor jobs")
_RUN = _tests("run_edges placeholders env_hygiene affinity frameworks each_shell check cli")
_COMMANDS = _tests("commands_edges jobs_edges cli help jobs ls_layout config check env_cmd each")
_VIEWS = _tests("views_edges ls_layout json queue_visible each_output plan_cli env_cmd machine_states")
_IN_PROCESS = _tests("api_types api api_model notebook")
_HARDWARE = _tests("hardware_edges views_edges options_edges snapshot nvml_backend nvml_reads nvml_faults mig affinity machine_states")
_OPTIONS = _tests("options_edges help cli bad_input config manpage completions")
_BASE = _tests("units records bounds cli")
TESTS = {"reservations": _RESERVATIONS, "placing": _RESERVATIONS, "sweeps": _tests("sweeps_edges each_scheduling each"),
         "choose": _CHOOSE, "fit": _FIT, "modelfile": _MODELFILE, "cluster": _CLUSTER, "jobs": _JOBS, "run": _RUN,
         "commands": _COMMANDS, "views": _VIEWS, "in_process": _IN_PROCESS, "hardware": _HARDWARE,
         "options": _OPTIONS, "base": _BASE}
_LOCKS = _tests("lock_edges reservation_pins lock_ownership bad_lock_files")
MODULE_TESTS: dict[str, list[str]] = {
    "reservations/acquire.py": _LOCKS + _tests("reservations locks_at_every_depth nesting each_scheduling wait "
                                               "hostile"),
    "reservations/hardening.py": _tests("hardened_locks lock_edges reservation_pins lock_ownership bad_lock_files "
                                        "config"),
    "reservations/holders.py": _LOCKS + _tests("locks_at_every_depth reservations wait ls_layout"),
    "reservations/lockdir.py": _tests("nesting_edges") + _LOCKS + _tests("hardened_locks locks_at_every_depth "
                                                                      "reservations"),
    "reservations/nesting.py": _tests("nesting_edges nesting locks_at_every_depth lock_edges reservation_pins "
                                      "lock_ownership bad_lock_files"),
    "reservations/reservations.py": _LOCKS + _tests("reservations nesting"),
    "placing/pick.py": _tests("hardware_edges") + _LOCKS + _tests("mig cli api nvml_reads plan_cli choose_by_model reservations wait"),
    "fit/model_plan.py": _tests("nodes_plan plan_cli"),
    "fit/sizing.py": _tests("sizing_edges plan_cli choose_by_model"),
    "sweeps/jobfile.py": _tests("sweeps_edges lock_edges bounds jobs each_output"),
    "reservations/waitqueue.py": _tests("queue queue_visible wait"),
    "reservations/waiting.py": _tests("wait queue"),
    "fit/nodes.py": _tests("nodes_plan nodes"),
    "fit/stages.py": _tests("nodes_plan nodes"),
    "sweeps/feed.py": _tests("sweeps_edges each_stream each"),
    "sweeps/sweep.py": _tests("each_scheduling each each_shell each_queue each_output each_shaping"),
    "choose/accounting.py": _tests("nvisel_options machine_states nvml_backend ls_layout ls_holders snapshot"),
    "fit/cmdline/node_flags.py": _tests("node_flags nodes_submission nodes engine_flags"),
    "fit/cmdline/python_options.py": _tests("python_forms engine_flags"),
    # the engines' tables also fill in every node's flags (on_nodes): the node tests check those (their ranges first)
    **{f"fit/cmdline/{m}.py": _tests("engine_flag_edges node_flags nodes nodes_submission engine_flags")
       for m in ("torchrun", "vllm", "sglang", "accelerate", "deepspeed", "llama_cpp")},
    "fit/cmdline/llama_cpp_python.py": _tests("python_forms plan_engine_flags"),
    "modelfile/hfcache.py": _tests("plan_cli"),
    # the rooms sampled since issue 37: the fast direct tests first
    "cluster/task.py": _tests("cluster_edges each_slurm nodes_slurm nodes"),
    "cluster/rendezvous.py": _tests("cluster_edges nodes nodes_netns"),
    "cluster/following.py": _tests("cluster_edges each_slurm nodes_slurm nodes"),
    "cluster/nodejob.py": _tests("cluster_edges nodes_submission nodes nodes_slurm"),
    "jobs/status.py": _tests("jobs_edges job_supervisor jobs"),
    "jobs/store.py": _tests("jobs_edges jobs"),
    "jobs/recordfile.py": _tests("jobs_edges supervisor_edges jobs"),
    "run/placeholders.py": _tests("run_edges placeholders each_shell each"),
    "run/shellwords.py": _tests("run_edges placeholders each_shell"),
    "run/affinity.py": _tests("affinity run_edges"),
    "run/frameworks.py": _tests("frameworks env_hygiene"),
    "run/cuda_probe.py": _tests("check run_edges"),
    "commands/jobs.py": _tests("commands_edges jobs_edges jobs"),
    "commands/log.py": _tests("commands_edges jobs_edges jobs"),
    "commands/cancel.py": _tests("commands_edges jobs_edges jobs"),
    "commands/submit.py": _tests("launch_edges cluster_edges nodes_submission each_slurm nodes jobs"),
    "commands/ls.py": _tests("views_edges ls_layout ls_holders json queue_visible nvml_reads"),
    "commands/each.py": _tests("each each_output each_shell each_queue each_slurm nvml_reads each_stream"),
    "commands/locks.py": _tests("commands_edges hardened_locks"),
    "commands/completions.py": _tests("completions"),
    "commands/plan.py": _tests("plan_cli"),
    # the modules of commands/, views/, in_process/ never sampled before (seed 38): their own tests first, so that
    # --quick runs what exercises them, not the package's first two files
    "commands/wait.py": _tests("commands_edges job_outcomes jobs"),
    "commands/env.py": _tests("env_cmd commands_edges"),
    "commands/check.py": _tests("check commands_edges"),
    "commands/config.py": _tests("config options_edges"),
    "commands/launch.py": _tests("launch_edges cli run_edges env_hygiene training_plan plan_cli plan_engine_flags nodes"),
    **{f"commands/completion/{m}.py": _tests("completions") for m in ("bash", "fish", "zsh", "helper", "words")},
    "views/render.py": _tests("views_edges cli ls_layout"),
    "views/schemas.py": _tests("views_edges json"),
    "views/shellenv.py": _tests("env_cmd views_edges"),
    "views/status_line.py": _tests("views_edges wait"),
    "views/training_view.py": _tests("training_plan plan_cli"),
    "views/ls_processes.py": _tests("views_edges ls_holders"),
    **{f"in_process/{m}.py": _tests("api notebook api_model") for m in ("cuda_state", "devices", "holding")},
    "in_process/keywords.py": _tests("options_edges api notebook api_model"),
    "options/peers.py": _tests("nvisel_options cluster_edges"),
    "views/jobs_table.py": _tests("jobs_edges views_edges jobs"),
    "views/queue_table.py": _tests("views_edges queue_visible"),
    "views/ls_table.py": _tests("views_edges ls_layout ls_holders json"),
    "views/each_view.py": _tests("views_edges each_output each"),
    "views/plan_view.py": _tests("plan_cli nodes_plan"),
    "views/watch.py": _tests("views_edges ls_layout"),
    "hardware/snapshot.py": _tests("options_edges snapshot machine_states mig nvml_backend"),
    "hardware/model.py": _tests("hardware_edges views_edges snapshot machine_states"),
    "hardware/host.py": _tests("hardware_edges affinity nvml_backend cluster_edges nodes"),
    "options/config.py": _tests("options_edges commands_edges config cli"),
    "options/args.py": _tests("options_edges help cli bad_input"),
    "options/values.py": _tests("options_edges bad_input cli help"),
    "options/manpage.py": _tests("manpage"),
    "base/units.py": _tests("units bounds cli"),
    # the rooms of seed 38 never sampled, or sampled against tests that never reach them (the fast direct tests first)
    "jobs/supervisor.py": _tests("supervisor_edges job_outcomes job_supervisor jobs jobs_edges"),
    "jobs/start.py": _tests("jobs_edges job_store_edges jobs job_outcomes"),
    "jobs/proof.py": _tests("commands_edges jobs_edges job_store_edges"),
    **{f"hardware/{m}.py": _tests("hardware_edges nvml_backend nvml_faults nvml_reads mig snapshot")
       for m in ("nvml", "nvml_answers", "nvml_calls", "nvml_topology", "read")},
    "hardware/files.py": _tests("hardware_edges options_edges snapshot config nvml_faults"),
    "cluster/rundir.py": _tests("run_dirs cluster_edges nodes_submission nodes"),
    "base/text.py": _tests("bounds modelfile_limits units cli"),
    "base/streams.py": _tests("hostile each_output cli"),
    "base/interrupt.py": _tests("ctrl_c_start_up hostile cli"),
    "reservations/backfill.py": _tests("backfill_shadow backfill lock_edges reservations"),
    "base/records.py": _tests("records api_types"),
    "modelfile/mlc.py": _tests("plan_cli fit_kv_families"),
    # seed 38, mut-c: the training sizing, DeepSeek V4's cache and the weights' dtype against their rule tests
    **{f"fit/training/{m}.py": _tests(f"{first} training_memory_rules training_backward_moments training_params "
                                      "training_fsdp_units training_plan training_memory")
       for m, first in (("memory", "training_weights_bytes"), ("memory_params", "training_params"),
                        ("memory_activations", "training_activation_rules"), ("memory_backward", "training_backward_moments"),
                        ("memory_sharding", "training_fsdp_units"), ("steps", "training_steps"))},
    **{f"fit/training/{m}.py": _tests("training_forms training_plan python_forms")
       for m in ("setup", "forms", "forms_common", "forms_hf", "forms_files", "forms_launchers", "forms_axolotl",
                 "forms_llamafactory", "forms_torchtune", "forms_trl")},
    "fit/training/forms_hf.py": _tests("training_forms_hf training_forms training_plan python_forms"),
    # session of 2026-12-02: the step's rules added since seed 38, each against its own rule tests first
    "fit/training/memory_zero3.py": _tests("training_zero3_replay training_memory_rules training_plan"),
    "fit/training/memory_first_layer.py": _tests("training_activation_rules training_backward_moments "
                                                "training_memory_rules training_plan"),
    "fit/training/memory_fused.py": _tests("training_fused_head training_memory_rules training_plan"),
    "fit/training/memory_generation.py": _tests("training_generation training_memory_rules training_plan"),
    "fit/training/memory_preference.py": _tests("training_forms_dpo training_memory_dpo training_plan"),
    "fit/training/interpreter.py": _tests("training_forms training_plan python_forms"),
    "fit/training/sizing_training.py": _tests("training_plan training_shortfall_lines plan_cli"),
    "fit/kv_dsv4.py": _tests("fit_kv_dsv4 fit_kv_families plan_cli"),
    "fit/weights_dtype.py": _tests("weights_dtype_rules fit_dtype fit_kv_families plan_cli"),
    # the property tests (hypothesis, ~25 s) only for the search itself; the search's own modules first against
    # test_ranking (brute force on synthetic machines, 10 s), which --quick's first two files never reached (seed 39)
    **{f"choose/{m}.py": _CHOOSE + ["tests/test_properties.py"]
       for m in ("select", "ranking", "branch_and_bound", "heuristic", "pool")},
    **{f"choose/{m}.py": _tests("ranking choice_edges") + _CHOOSE + ["tests/test_properties.py"]
       for m in ("ranking", "branch_and_bound", "heuristic", "pool")},
    # seed 39, mut: the modules of choose/, modelfile/ and fit/ whose --quick pair (the package's first two files)
    # never imported them: the tests that do, first
    "choose/explain.py": _tests("explain choice_edges choice_states"),
    "choose/by_model.py": _tests("choose_by_model model_shortfall_lines plan_cli"),
    "choose/model_sets.py": _tests("choose_by_model model_shortfall_lines plan_cli"),
    "choose/model_shortfall.py": _tests("model_shortfall_lines choose_by_model sizing_edges"),
    "choose/mig.py": _tests("mig choice_edges choice_states"),
    "choose/visibility.py": _tests("visibility choice_edges machine_states"),
    "choose/spec.py": _tests("spec choice_edges select properties"),
    "choose/training_shortfall.py": _tests("training_shortfall_lines training_plan choose_by_model"),
    "modelfile/bounded.py": _tests("modelfile_limits modelfile_hostile modelfile_gguf modelfile_safetensors "
                                   "modelfile_strings model_paths"),
    "modelfile/facts.py": _tests("fit_kv sizing_edges fit_kv_families"),
    "modelfile/gguf.py": _tests("modelfile_gguf modelfile_edges modelfile_limits"),
    "modelfile/safetensors.py": _tests("modelfile_safetensors modelfile_limits"),
    **{f"modelfile/{m}.py": _tests("engine_archs fit_kv_families fit_kv_vllm")
       for m in ("gguf_facts", "llama_archs", "vllm_archs")},
    "modelfile/hfconfig.py": _tests("fit_kv_vllm sizing_edges fit_dtype fit_kv_families"),
    "modelfile/read.py": _tests("modelfile_edges modelfile_gguf modelfile_safetensors modelfile_limits"),
    "modelfile/grouping.py": _tests("fit_kv_families engine_archs modelfile_safetensors"),
    "fit/kv.py": _tests("fit_kv fit_kv_families fit_kv_vllm sizing_edges"),
    "fit/kv_llama.py": _tests("sizing_edges fit_kv_families fit_kv"),
    "fit/kv_vllm.py": _tests("fit_kv_vllm sizing_edges fit_dtype"),
    "fit/kv_units.py": _tests("fit_dtype fit_kv sizing_edges"),
    "fit/offload.py": _tests("fit_offload plan_cli"),
    "fit/plan.py": _tests("fit_plan sizing_edges plan_cli choose_by_model"),
    "fit/engines.py": _tests("fit_plan sizing_edges engine_flags"),
    "fit/command.py": _tests("fit_plan engine_flags plan_engine_flags"),
    "fit/gpu_tiers.py": _tests("fit_kv_vllm fit_plan plan_cli"),
    "fit/settings.py": _tests("sizing_edges fit_plan plan_cli"),
}
