"""Subject tables: MMLU's four categories and C-Eval's Chinese subject names.

MMLU. `MMLU_CATEGORIES` maps each of the 57 subjects to the category lm-evaluation-harness groups it
under (`mmlu_stem`, `mmlu_humanities`, `mmlu_social_sciences`, `mmlu_other`; the same split as the
MMLU paper's four groups): 19 STEM, 13 humanities, 12 social sciences, 13 other.

C-Eval. A C-Eval prompt names the subject in Chinese ("以下是中国关于高中物理的单项选择题…").
`CEVAL_SUBJECTS_ZH` holds the Chinese names of the 52 C-Eval subjects, as lm-evaluation-harness
writes them into its `ceval-valid_<subject>` task descriptions. `ceval_subject_names(path)` reads
another table: either `{"subject": "中文名"}` or the official `subject_mapping.json` layout
`{"subject": ["English name", "中文名", "Category"]}` (the category is then used for per-category
results). A subject found in neither falls back to its code.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

STEM, HUMANITIES, SOCIAL_SCIENCES, OTHER = "stem", "humanities", "social_sciences", "other"
MMLU_CATEGORY_ORDER = (STEM, HUMANITIES, SOCIAL_SCIENCES, OTHER)

MMLU_CATEGORIES: dict[str, str] = {
    "abstract_algebra": STEM,
    "anatomy": STEM,
    "astronomy": STEM,
    "business_ethics": OTHER,
    "clinical_knowledge": OTHER,
    "college_biology": STEM,
    "college_chemistry": STEM,
    "college_computer_science": STEM,
    "college_mathematics": STEM,
    "college_medicine": OTHER,
    "college_physics": STEM,
    "computer_security": STEM,
    "conceptual_physics": STEM,
    "econometrics": SOCIAL_SCIENCES,
    "electrical_engineering": STEM,
    "elementary_mathematics": STEM,
    "formal_logic": HUMANITIES,
    "global_facts": OTHER,
    "high_school_biology": STEM,
    "high_school_chemistry": STEM,
    "high_school_computer_science": STEM,
    "high_school_european_history": HUMANITIES,
    "high_school_geography": SOCIAL_SCIENCES,
    "high_school_government_and_politics": SOCIAL_SCIENCES,
    "high_school_macroeconomics": SOCIAL_SCIENCES,
    "high_school_mathematics": STEM,
    "high_school_microeconomics": SOCIAL_SCIENCES,
    "high_school_physics": STEM,
    "high_school_psychology": SOCIAL_SCIENCES,
    "high_school_statistics": STEM,
    "high_school_us_history": HUMANITIES,
    "high_school_world_history": HUMANITIES,
    "human_aging": OTHER,
    "human_sexuality": SOCIAL_SCIENCES,
    "international_law": HUMANITIES,
    "jurisprudence": HUMANITIES,
    "logical_fallacies": HUMANITIES,
    "machine_learning": STEM,
    "management": OTHER,
    "marketing": OTHER,
    "medical_genetics": OTHER,
    "miscellaneous": OTHER,
    "moral_disputes": HUMANITIES,
    "moral_scenarios": HUMANITIES,
    "nutrition": OTHER,
    "philosophy": HUMANITIES,
    "prehistory": HUMANITIES,
    "professional_accounting": OTHER,
    "professional_law": HUMANITIES,
    "professional_medicine": OTHER,
    "professional_psychology": SOCIAL_SCIENCES,
    "public_relations": SOCIAL_SCIENCES,
    "security_studies": SOCIAL_SCIENCES,
    "sociology": SOCIAL_SCIENCES,
    "us_foreign_policy": SOCIAL_SCIENCES,
    "virology": OTHER,
    "world_religions": HUMANITIES,
}

CEVAL_SUBJECTS_ZH: dict[str, str] = {
    "computer_network": "计算机网络",
    "operating_system": "操作系统",
    "computer_architecture": "计算机组成",
    "college_programming": "大学编程",
    "college_physics": "大学物理",
    "college_chemistry": "大学化学",
    "advanced_mathematics": "高等数学",
    "probability_and_statistics": "概率统计",
    "discrete_mathematics": "离散数学",
    "electrical_engineer": "注册电气工程师",
    "metrology_engineer": "注册计量师",
    "high_school_mathematics": "高中数学",
    "high_school_physics": "高中物理",
    "high_school_chemistry": "高中化学",
    "high_school_biology": "高中生物",
    "middle_school_mathematics": "初中数学",
    "middle_school_biology": "初中生物",
    "middle_school_physics": "初中物理",
    "middle_school_chemistry": "初中化学",
    "veterinary_medicine": "兽医学",
    "college_economics": "大学经济学",
    "business_administration": "工商管理",
    "marxism": "马克思主义基本原理",
    "mao_zedong_thought": "毛泽东思想和中国特色社会主义理论体系概论",
    "education_science": "教育学",
    "teacher_qualification": "教师资格",
    "high_school_politics": "高中政治",
    "high_school_geography": "高中地理",
    "middle_school_politics": "初中政治",
    "middle_school_geography": "初中地理",
    "modern_chinese_history": "近代史纲要",
    "ideological_and_moral_cultivation": "思想道德修养与法律基础",
    "logic": "逻辑学",
    "law": "法学",
    "chinese_language_and_literature": "中国语言文学",
    "art_studies": "艺术学",
    "professional_tour_guide": "导游资格",
    "legal_professional": "法律职业资格",
    "high_school_chinese": "高中语文",
    "high_school_history": "高中历史",
    "middle_school_history": "初中历史",
    "civil_servant": "公务员",
    "sports_science": "体育学",
    "plant_protection": "植物保护",
    "basic_medicine": "基础医学",
    "clinical_medicine": "临床医学",
    "urban_and_rural_planner": "注册城乡规划师",
    "accountant": "注册会计师",
    "fire_engineer": "注册消防工程师",
    "environmental_impact_assessment_engineer": "环境影响评价工程师",
    "tax_accountant": "税务师",
    "physician": "医师资格",
}

# C-Eval's four categories, per the C-Eval paper (Huang et al., 2023) and its subject_mapping.json:
# the subjects above in order, 20 STEM, 10 Social Science, 11 Humanities, 11 Other.
_CEVAL_CATEGORY_SIZES = (("STEM", 20), ("Social Science", 10), ("Humanities", 11), ("Other", 11))
CEVAL_CATEGORY_ORDER = tuple(name for name, _ in _CEVAL_CATEGORY_SIZES)
CEVAL_CATEGORIES: dict[str, str] = dict(
    zip(CEVAL_SUBJECTS_ZH, (name for name, size in _CEVAL_CATEGORY_SIZES for _ in range(size)), strict=True)
)


def mmlu_category(subject: str) -> str:
    """The lm-evaluation-harness category of an MMLU subject (KeyError for an unknown subject)."""
    try:
        return MMLU_CATEGORIES[subject]
    except KeyError:
        raise KeyError(f"{subject!r} is not one of the 57 MMLU subjects") from None


def ceval_subject_names(
    mapping: str | os.PathLike | Mapping[str, str | list | tuple] | None = None,
) -> tuple[dict[str, str], dict[str, str]]:
    """`(names, categories)`: Chinese subject names and categories, the built-in tables
    (`CEVAL_SUBJECTS_ZH`, `CEVAL_CATEGORIES`) overridden by what `mapping` gives.

    `mapping` is a path to a JSON file or a dict, either `{subject: "中文名"}` or
    `{subject: [english, 中文名, category]}`.
    """
    names = dict(CEVAL_SUBJECTS_ZH)
    categories = dict(CEVAL_CATEGORIES)
    if mapping is None:
        return names, categories
    if not isinstance(mapping, Mapping):
        mapping = json.loads(Path(mapping).read_text(encoding="utf-8"))
    for subject, value in mapping.items():
        if isinstance(value, str):
            names[subject] = value
        elif isinstance(value, (list, tuple)) and len(value) >= 2:
            names[subject] = str(value[1])
            if len(value) >= 3 and value[2]:
                categories[subject] = str(value[2])
        else:
            raise ValueError(f"subject {subject!r}: expected a name or [english, chinese, category], got {value!r}")
    return names, categories


# CMMLU's 67 subjects and their Chinese names, as lm-eval's `cmmlu_<subject>` descriptions give them.
CMMLU_SUBJECTS = {
    "agronomy": "农学", "anatomy": "解剖学", "ancient_chinese": "古汉语", "arts": "艺术学", "astronomy": "天文学",
    "business_ethics": "商业伦理", "chinese_civil_service_exam": "中国公务员考试", "chinese_driving_rule": "中国驾驶规则",
    "chinese_food_culture": "中国饮食文化", "chinese_foreign_policy": "中国外交政策", "chinese_history": "中国历史",
    "chinese_literature": "中国文学", "chinese_teacher_qualification": "中国教师资格", "clinical_knowledge": "临床知识",
    "college_actuarial_science": "大学精算学", "college_education": "大学教育学", "college_engineering_hydrology": "大学工程水文学",
    "college_law": "大学法律", "college_mathematics": "大学数学", "college_medical_statistics": "大学医学统计",
    "college_medicine": "大学医学", "computer_science": "计算机科学", "computer_security": "计算机安全",
    "conceptual_physics": "概念物理学", "construction_project_management": "建设工程管理", "economics": "经济学",
    "education": "教育学", "electrical_engineering": "电气工程", "elementary_chinese": "小学语文",
    "elementary_commonsense": "小学常识", "elementary_information_and_technology": "小学信息技术",
    "elementary_mathematics": "初等数学", "ethnology": "民族学", "food_science": "食品科学", "genetics": "遗传学",
    "global_facts": "全球事实", "high_school_biology": "高中生物", "high_school_chemistry": "高中化学",
    "high_school_geography": "高中地理", "high_school_mathematics": "高中数学", "high_school_physics": "高中物理学",
    "high_school_politics": "高中政治", "human_sexuality": "人类性行为", "international_law": "国际法学", "journalism": "新闻学",
    "jurisprudence": "法理学", "legal_and_moral_basis": "法律与道德基础", "logical": "逻辑学", "machine_learning": "机器学习",
    "management": "管理学", "marketing": "市场营销", "marxist_theory": "马克思主义理论", "modern_chinese": "现代汉语",
    "nutrition": "营养学", "philosophy": "哲学", "professional_accounting": "专业会计", "professional_law": "专业法学",
    "professional_medicine": "专业医学", "professional_psychology": "专业心理学", "public_relations": "公共关系",
    "security_study": "安全研究", "sociology": "社会学", "sports_science": "体育学", "traditional_chinese_medicine": "中医中药",
    "virology": "病毒学", "world_history": "世界历史", "world_religions": "世界宗教",
}


__all__ = [
    "CEVAL_CATEGORIES",
    "CEVAL_CATEGORY_ORDER",
    "CEVAL_SUBJECTS_ZH",
    "CMMLU_SUBJECTS",
    "HUMANITIES",
    "MMLU_CATEGORIES",
    "MMLU_CATEGORY_ORDER",
    "OTHER",
    "SOCIAL_SCIENCES",
    "STEM",
    "ceval_subject_names",
    "mmlu_category",
]
