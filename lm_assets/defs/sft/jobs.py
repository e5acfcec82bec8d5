"""The fine-tuning jobs: the instruction examples, the preference pairs, the fine-tuning dataset, and the run."""

from lm_assets.defs.common.jobs import workload_job

instruction_data_job = workload_job("instruction_data_job", "sft", ("instruction_data",),
                                 "Instruction examples read, validated, deduplicated and decontaminated.")
preference_data_job = workload_job("preference_data_job", "sft", ("preference_data",),
                                 "Preference pairs read, validated, deduplicated and decontaminated.")
preference_dataset_job = workload_job("preference_dataset_job", "sft", ("preference_dataset",),
                                    "The preference pairs templated, tokenized with each answer marked, one pair to a row.")
sft_dataset_job = workload_job("sft_dataset_job", "sft", ("sft_dataset",),
                            "The instruction examples templated, tokenized with loss masks and packed for fine-tuning.")
sft_job = workload_job("sft_job", "training", ("sft_run", "sft_checkpoint"),
                    "Supervised fine-tuning of a pretraining checkpoint on sft_dataset.")

dpo_job = workload_job("dpo_job", "training", ("dpo_run", "dpo_checkpoint"),
                    "Direct preference optimization of a fine-tuned checkpoint on preference_dataset.")

JOBS = [instruction_data_job, preference_data_job, preference_dataset_job, sft_dataset_job, sft_job, dpo_job]
