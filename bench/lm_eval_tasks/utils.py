"""Turn rows of the original MMLU CSVs into the documents of lm-eval's `mmlu` tasks (`cais/mmlu` schema).

bench/eval_agreement.py writes the task files of its local `mmlu_local_<subject>` tasks, and a copy of
this file beside them, into its output folder on every run.

The CSVs have no header: question, A, B, C, D, answer (a letter). The task files read them with
`dataset_path: csv`, `column_names` and a `str` converter for every column, so that pandas keeps
every cell as written (no numbers, booleans or NaN made of answers like "0.50", "TRUE" or "None").
`process_docs` then gives each document lm-eval's `mmlu` fields: `question`, `choices` (four strings)
and `answer` (the index 0-3), so `doc_to_text`, `doc_to_choice` and `doc_to_target` are upstream's.
"""

LETTERS = "ABCD"


def _to_mmlu(doc: dict) -> dict:
    return {
        "question": doc["question"],
        "choices": [doc["A"], doc["B"], doc["C"], doc["D"]],
        "answer": LETTERS.index(doc["letter"].strip()),
    }


def process_docs(dataset):
    # The letter column is renamed first: `map` would keep a returned "answer" in the string column's type.
    dataset = dataset.rename_column("answer", "letter")
    return dataset.map(_to_mmlu, remove_columns=["A", "B", "C", "D", "letter"])
