"""Explanations as models write them, each marked up with what the blind verifier may read.

In each text, ``{{…}}`` marks a statement of the answer (it states the final answer, names a
choice as the answer, or tells the reader which choice to pick: nothing of it may reach the
verifier) and ``<<…>>`` a piece of reasoning (it must reach the verifier as written), including
why each distractor is wrong. Text outside both marks is layout only (line breaks, list marks,
Markdown rules and emphasis) and may go either way; ``[[…]]`` marks a heading that says nothing
of the answer and may also go either way.

The phrasings are those seen in real replies: the answer stated first in a paragraph, in a list
item, in parentheses, after a label or a Markdown rule or heading, as an ordinal ("두 번째
보기", "the second option"), as the choice's own text ("칼슘이 정답이다"), as advice ("…를
고르면 된다"), and with its reason in the same sentence ("Option B is correct because…").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MINERALS_KO = ("철", "칼슘", "나트륨", "칼륨")  # 뼈와 치아의 주성분인 무기질은? (②)
MINERALS_EN = ("Iron", "Calcium", "Sodium", "Potassium")  # the main mineral of bone? (B)
CITIES_KO = ("부산", "서울", "인천", "대구")  # 대한민국의 수도는? (②)
PLANETS_EN = ("Mercury", "Venus", "Earth", "Mars")  # the Red Planet? (4)
PROCESSES_KO = ("광합성", "호흡", "증산 작용", "발효")  # 빛 에너지로 포도당을 만드는 과정은? (①)
SUMS = ("2", "3", "4", "5")  # 2 + 2 = ? (3: "4")
# 다음 중 옳지 않은 것은? ③ is the false statement, so the answer.
STATEMENTS_KO = (
    "물은 100 °C에서 끓는다",
    "빛은 진공에서도 전파된다",
    "소리는 진공에서도 전파된다",
    "얼음은 물보다 밀도가 작다",
)
FOUNDERS_KO = ("온조", "주몽", "박혁거세", "김수로")  # 고구려를 세운 인물은? (②)
FOUNDERS_EN = ("Onjo", "Jumong", "Bak Hyeokgeose", "Kim Suro")  # who founded Goguryeo? (B)
EQUATIONS_KO = ("x = 1", "x = 2", "x = 3", "x = 4")  # 2x + 3 = 7의 해는? (②)
EQUATIONS_EN = ("x = 2", "x = 3", "x = 4", "x = 5")  # solve 3x - 2 = 10 (C)
FRACTIONS = ("2/5", "5/6", "1/6", "2/6")  # 1/2 + 1/3 = ? (②)
SPELLING_KO = ("몇일", "며칠", "몇 일", "몇칠")  # 맞춤법이 올바른 것은? (②)
PARTICLES_KO = (
    "주격 조사",
    "목적격 조사",
    "부사격 조사",
    "보조사",
)  # '친구와 맞서다'의 '와'는? (③)
GASES_KO = ("산소", "이산화 탄소", "질소", "수소")  # 석회수를 뿌옇게 흐리는 기체는? (②)
GASES_EN = ("Oxygen", "Carbon dioxide", "Nitrogen", "Hydrogen")  # turns limewater milky? (B)
ACIDITY_KO = ("비눗물", "식초", "암모니아수", "석회수")  # 산성 용액은? (②)
# 알짜힘이 0일 때 물체의 운동은? (②)
MOTION_KO = (
    "속력이 점점 빨라진다",
    "정지하거나 등속 직선 운동을 한다",
    "속력이 점점 느려진다",
    "운동 방향이 바뀐다",
)
VERBS_EN = ("go", "goes", "going", "went")  # She ___ to school every day. (②)
VOCABULARY_EN = ("face", "fact", "faith", "fame")  # The two teams will ___ each other. (①)

_MARK = re.compile(r"\{\{(.*?)\}\}|<<(.*?)>>|\[\[(.*?)\]\]", re.S)


@dataclass(frozen=True)
class Case:
    """One explanation: its text, the question's choices and key (1-based), and its pieces."""

    name: str
    marked: str
    choices: tuple[str, ...]
    key: int
    # Written apart from the hider, with words that hold an answer word without being one
    # (들어맞다, 정답률, "right-hand side"): measured apart by bench.hide_statements.
    trap: bool = False

    @property
    def text(self) -> str:
        """The explanation as the model wrote it (the marks off)."""
        return _MARK.sub(lambda m: m[1] or m[2] or m[3] or "", self.marked)

    @property
    def statements(self) -> list[str]:
        return [m[1] for m in _MARK.finditer(self.marked) if m[1] is not None]

    @property
    def reasoning(self) -> list[str]:
        return [m[2] for m in _MARK.finditer(self.marked) if m[2] is not None]

    @property
    def neutral(self) -> list[str]:
        return [m[3] for m in _MARK.finditer(self.marked) if m[3] is not None]


def _case(name: str, choices: tuple[str, ...], key: int, marked: str, trap: bool = False) -> Case:
    return Case(name, marked, choices, key, trap)


CORPUS: tuple[Case, ...] = (
    _case(
        "ko-first-paragraph",
        MINERALS_KO,
        2,
        "{{정답은 ②번이다.}} <<칼슘은 뼈와 치아를 이루는 주된 무기질이다.>> <<①의 철은 "
        "헤모글로빈의 성분이므로 틀리다.>> <<③ 나트륨과 ④ 칼륨은 체액의 삼투압과 신경 전달에 "
        "관여한다.>>\n"
        "{{정답: ②}}",
    ),
    _case(
        "ko-reason-why",
        MINERALS_KO,
        2,
        "{{②번이 정답인 이유를 살펴보자.}}\n"
        "<<칼슘은 뼈와 치아를 단단하게 만드는 무기질이다.>> <<철은 혈액의 헤모글로빈에 들어 "
        "있으므로 뼈의 주성분이 아니다.>>\n"
        "{{정답: ②}}",
    ),
    _case(
        "ko-choose-first",
        MINERALS_KO,
        2,
        "{{정답으로 ②번을 고른다.}} <<뼈의 약 99 %의 칼슘이 저장되어 있기 때문이다.>>\n"
        "<<① 철: 적혈구의 헤모글로빈을 만드는 데 쓰인다.>>\n"
        "<<③ 나트륨: 체액의 삼투압을 조절한다.>>\n"
        "<<④ 칼륨: 신경과 근육의 흥분에 관여한다.>>\n"
        "{{정답: ②}}",
    ),
    _case(
        "ko-choice-text-right-answer",
        MINERALS_KO,
        2,
        "{{② 칼슘이 맞는 답이다.}} <<칼슘은 인산과 결합해 뼈의 단단한 부분을 만든다.>> <<나머지 "
        "무기질은 뼈의 주성분이 아니다.>>\n"
        "\n"
        "{{정답: ②}}",
    ),
    _case(
        "ko-label-rule-answer",
        MINERALS_KO,
        2,
        "<<칼슘은 뼈와 치아의 주성분이다.>> <<철, 나트륨, 칼륨은 뼈를 이루는 양이 적다.>>\n"
        "\n"
        "{{**정답**}}\n"
        "\n"
        "---\n"
        "\n"
        "{{②}}",
    ),
    _case(
        "ko-pick-advice",
        MINERALS_KO,
        2,
        "<<뼈와 치아를 이루는 무기질은 주로 인산칼슘이다.>> <<철은 혈액, 나트륨과 칼륨은 체액의 "
        "이온으로 작용한다.>> {{따라서 칼슘을 고르면 된다.}}\n"
        "{{정답: ②}}",
    ),
    _case(
        "ko-choice-text-is-answer",
        MINERALS_KO,
        2,
        "{{칼슘이 정답이다.}} <<뼈와 치아의 무기질 대부분이 칼슘 화합물이기 때문이다.>>\n"
        "{{정답: ②}}",
    ),
    _case(
        "ko-so-it-is-right",
        MINERALS_KO,
        2,
        "<<칼슘은 뼈에 인산칼슘의 형태로 저장된다.>> <<①은 철이므로 틀리다.>> <<③과 ④는 "
        "전해질이다.>> {{따라서 ②가 맞다.}}\n"
        "{{정답: ②}}",
    ),
    _case(
        "ko-ordinal",
        MINERALS_KO,
        2,
        "<<뼈를 단단하게 하는 것은 인산칼슘이다.>> {{그러므로 두 번째 보기가 정답이다.}} <<첫 "
        "번째 보기인 철은 헤모글로빈의 성분일 뿐이다.>>\n"
        "{{정답: ②}}",
    ),
    _case(
        "ko-parenthesis",
        MINERALS_KO,
        2,
        "<<칼슘은 뼈와 치아의 주성분이다>>{{(정답 ②)}}. <<철은 헤모글로빈의 성분이다.>>\n"
        "{{정답: ②}}",
    ),
    _case(
        "ko-bold-label-inline",
        MINERALS_KO,
        2,
        "{{**정답: ② 칼슘**}}\n"
        "\n"
        "<<칼슘은 뼈와 치아의 주요 구성 성분으로, 체내 칼슘의 대부분이 뼈에 있다.>> <<철은 산소 "
        "운반, 나트륨과 칼륨은 신경 신호 전달에 주로 쓰인다.>>",
    ),
    _case(
        "ko-list-with-answer-item",
        MINERALS_KO,
        2,
        "- <<① 철: 헤모글로빈의 구성 성분이므로 틀리다.>>\n"
        "- {{② 칼슘: 정답이다.}} <<뼈와 치아의 주성분이다.>>\n"
        "- <<③ 나트륨: 체액의 삼투압을 조절한다.>>\n"
        "- <<④ 칼륨: 세포 안의 주된 양이온이다.>>\n"
        "\n"
        "{{정답: ②}}",
    ),
    _case(
        "ko-heading-answer",
        MINERALS_KO,
        2,
        "[[## 풀이]]\n"
        "<<칼슘은 뼈와 치아의 주성분이다.>> <<철은 혈액에, 나트륨과 칼륨은 체액에 많다.>>\n"
        "\n"
        "{{## 정답}}\n"
        "{{②번}}",
    ),
    _case(
        "ko-reason-clause-before",
        MINERALS_KO,
        2,
        "<<칼슘은 뼈와 치아의 주성분이므로>> {{정답은 ②번이다.}} <<철은 혈액 속 헤모글로빈의 "
        "성분이다.>>\n"
        "{{정답: ②}}",
    ),
    _case(
        "ko-answer-then-reason-comma",
        MINERALS_KO,
        2,
        "{{정답은 ②번으로,}} <<칼슘은 뼈와 치아를 이루는 가장 많은 무기질이다.>>\n{{정답: ②}}",
    ),
    _case(
        "ko-reason-because-of-answer",
        MINERALS_KO,
        2,
        "{{②번이 정답인 이유는}} <<칼슘이 인산과 결합해 뼈의 기질을 이루기 때문이다.>> <<①의 "
        "철은 이와 관계가 없다.>>\n"
        "{{정답: ②}}",
    ),
    _case(
        "ko-distractor-not-answer",
        MINERALS_KO,
        2,
        "<<① 철은 헤모글로빈의 성분이므로>> {{답이 아니다.}}\n"
        "<<② 칼슘은 뼈와 치아의 주성분이다.>>\n"
        "<<③ 나트륨은 삼투압 조절에 관여한다.>>\n"
        "{{정답: ②}}",
    ),
    _case(
        "ko-best-fit",
        MINERALS_KO,
        2,
        "<<뼈와 치아의 무기질 성분은 대부분 인산칼슘이다.>> {{따라서 ② 칼슘이 가장 적절하다.}}\n"
        "{{정답: ②}}",
    ),
    _case(
        "ko-select-polite",
        MINERALS_KO,
        2,
        "<<칼슘은 뼈와 치아를 구성합니다.>> <<철은 혈액, 나트륨과 칼륨은 신경 전달과 관련이 "
        "있습니다.>> {{그러므로 ②번을 선택해야 합니다.}}\n"
        "\n"
        "{{정답: ②}}",
    ),
    _case(
        "ko-check-mark-list",
        MINERALS_KO,
        2,
        "<<① 철 - 헤모글로빈의 성분 ✗>>\n"
        "<<② 칼슘 - 뼈와 치아의 주성분>> {{✅}}\n"
        "<<③ 나트륨 - 삼투압 조절 ✗>>\n"
        "<<④ 칼륨 - 신경 전달 ✗>>\n"
        "\n"
        "{{정답: ②}}",
    ),
    _case(
        "ko-capital-statement-first",
        CITIES_KO,
        2,
        "{{정답은 ② 서울입니다.}} <<서울은 조선 시대인 1394년부터 수도였으며, 지금도 대한민국의 "
        "수도입니다.>> <<부산은 최대 항구 도시이고, 인천은 국제공항이 있는 도시입니다.>>\n"
        "{{정답: ②}}",
    ),
    _case(
        "ko-capital-text-answer",
        CITIES_KO,
        2,
        "<<서울이 수도라는 것은 관습 헌법으로 인정된다.>> <<1394년 조선이 한양으로 도읍을 옮긴 "
        "뒤 지금까지 수도 기능을 해 왔다.>> {{그러므로 답은 서울이다.}}\n"
        "{{정답: ②}}",
    ),
    _case(
        "ko-capital-label-newline",
        CITIES_KO,
        2,
        "<<부산은 제2의 도시이고 대구는 내륙의 광역시이다.>> <<수도 기능은 서울에 있다.>>\n"
        "\n"
        "{{정답:}}\n"
        "{{② 서울}}",
    ),
    _case(
        "ko-process-final-answer",
        PROCESSES_KO,
        1,
        "<<식물은 엽록체에서 빛 에너지를 이용해 이산화 탄소와 물로 포도당을 만든다.>> <<호흡은 "
        "포도당을 분해해 에너지를 얻는 과정이므로 반대 방향이다.>> <<증산 작용은 잎에서 물이 "
        "빠져나가는 현상이다.>> {{최종 정답은 ① 광합성이다.}}\n"
        "{{정답: ①}}",
    ),
    _case(
        "ko-process-pick-first",
        PROCESSES_KO,
        1,
        "{{첫 번째 보기를 고르면 된다.}} <<빛 에너지로 포도당을 합성하는 과정이 광합성이기 "
        "때문이다.>> <<발효는 산소 없이 포도당을 분해한다.>>\n"
        "{{정답: ①}}",
    ),
    _case(
        "ko-negative-question",
        STATEMENTS_KO,
        3,
        "<<① 물은 1기압에서 100 °C에 끓는다.>> <<② 빛은 전자기파이므로 진공에서도 전파된다.>> "
        "<<③ 소리는 매질이 필요한 파동이므로 진공에서는 전파되지 않는다.>> <<④ 얼음은 물보다 "
        "밀도가 작아 물에 뜬다.>> {{따라서 옳지 않은 것은 ③이다.}}\n"
        "{{정답: ③}}",
    ),
    _case(
        "ko-negative-question-first",
        STATEMENTS_KO,
        3,
        "{{옳지 않은 설명은 ③번이다.}} <<소리는 공기 같은 매질의 진동으로 전달되므로 진공에서는 "
        "전파될 수 없다.>> <<나머지 보기는 모두 옳은 설명이다.>>\n"
        "{{정답: ③}}",
    ),
    _case(
        "ko-math", SUMS, 3, "<<2에 2를 더하면 4가 된다.>> {{따라서 정답은 ③ 4이다.}}\n{{정답: ③}}"
    ),
    _case(
        "ko-math-text",
        SUMS,
        3,
        "<<둘에 둘을 더하면 넷이다.>> {{그러므로 4가 맞다.}}\n\n{{정답: ③}}",
    ),
    _case(
        "ko-blockquote-answer",
        MINERALS_KO,
        2,
        "<<칼슘은 뼈와 치아의 주성분이다.>>\n\n{{> **정답: ②**}}",
    ),
    _case(
        "ko-answer-mid-paragraph",
        MINERALS_KO,
        2,
        "<<체내 무기질 가운데 가장 많은 것은 칼슘이다.>> {{이 문제의 답은 ②이다.}} <<칼슘의 99 "
        "%는 뼈와 치아에 있고, 나머지는 혈액과 근육에서 쓰인다.>>\n"
        "{{정답: ②}}",
    ),
    _case(
        "ko-explanation-heading-then-bold",
        MINERALS_KO,
        2,
        "{{### 정답 및 해설}}\n"
        "\n"
        "{{**②번**}}\n"
        "\n"
        "<<칼슘은 뼈와 치아의 주성분이다.>> <<철은 헤모글로빈, 나트륨과 칼륨은 전해질의 "
        "성분이다.>>",
    ),
    _case(
        "ko-summary-label",
        MINERALS_KO,
        2,
        "<<칼슘은 뼈의 주성분이다.>> <<철은 혈액에 있다.>>\n\n{{**결론:** 정답은 ② 칼슘입니다.}}",
    ),
    _case(
        "en-option-correct-because",
        MINERALS_EN,
        2,
        "{{Option B is correct}} <<because calcium phosphate makes up most of the mineral in "
        "bone.>> <<Iron is carried by haemoglobin in the blood.>> <<Sodium and potassium are "
        "electrolytes.>>\n"
        "{{Answer: 2}}",
    ),
    _case(
        "en-answer-first",
        MINERALS_EN,
        2,
        "{{The correct answer is (B) Calcium.}} <<Calcium and phosphate form hydroxyapatite, the "
        "hard mineral of bones and teeth.>> <<Iron (A) is part of haemoglobin, not of bone.>>\n"
        "{{Answer: 2}}",
    ),
    _case(
        "en-so-answer-clause",
        MINERALS_EN,
        2,
        "<<Bone mineral is mostly calcium phosphate,>> {{so the answer is B.}}\n{{Answer: 2}}",
    ),
    _case(
        "en-second-option",
        MINERALS_EN,
        2,
        "<<Bones store about 99% of the body's calcium.>> {{That makes the second option the "
        "right one.}} <<The first option, iron, is mainly found in red blood cells.>>\n"
        "{{Answer: 2}}",
    ),
    _case(
        "en-choose",
        MINERALS_EN,
        2,
        "<<Calcium is the main mineral in bones and teeth.>> <<Sodium and potassium regulate "
        "fluid balance and nerve signals.>> {{Therefore, choose B.}}\n"
        "{{Answer: 2}}",
    ),
    _case(
        "en-bold-final",
        MINERALS_EN,
        2,
        "<<Calcium gives bones their hardness.>> <<Iron, sodium and potassium are present in "
        "bone only in small amounts.>>\n"
        "\n"
        "{{**Final answer:** B}}",
    ),
    _case(
        "en-label-rule",
        MINERALS_EN,
        2,
        "<<Calcium is stored in bone as hydroxyapatite.>>\n\n{{**Answer**}}\n\n---\n\n{{**B**}}",
    ),
    _case(
        "en-text-is-answer",
        MINERALS_EN,
        2,
        "{{Calcium is the correct answer.}} <<It is the most abundant mineral in the body, and "
        "almost all of it is in the skeleton.>>\n"
        "{{Answer: 2}}",
    ),
    _case(
        "en-list-per-option",
        MINERALS_EN,
        2,
        "- <<A) Iron: part of haemoglobin; wrong.>>\n"
        "- {{B) Calcium: correct.}} <<It forms the mineral matrix of bone.>>\n"
        "- <<C) Sodium: an electrolyte in body fluids; wrong.>>\n"
        "- <<D) Potassium: the main cation inside cells; wrong.>>\n"
        "\n"
        "{{Answer: 2}}",
    ),
    _case(
        "en-parenthesis",
        MINERALS_EN,
        2,
        "<<Bones are mostly made of calcium phosphate>> {{(answer B)}}. <<Iron is in the blood.>>"
        "\n"
        "{{Answer: 2}}",
    ),
    _case(
        "en-we-pick",
        MINERALS_EN,
        2,
        "<<Hydroxyapatite, the mineral of bone, is a calcium phosphate.>> {{We therefore pick "
        "option B.}}\n"
        "{{Answer: 2}}",
    ),
    _case(
        "en-best-option",
        MINERALS_EN,
        2,
        "{{The best option is B, calcium,}} <<because it is the main structural mineral of bones "
        "and teeth.>> <<Potassium is mostly inside cells.>>\n"
        "{{Answer: 2}}",
    ),
    _case(
        "en-mars-reasoning-first",
        PLANETS_EN,
        4,
        "<<Mars looks red because iron oxide covers its surface.>> <<Venus is covered in "
        "yellowish clouds, Mercury is grey and Earth appears blue.>> {{So the answer is Mars.}}\n"
        "{{Answer: 4}}",
    ),
    _case(
        "en-mars-d-is-right",
        PLANETS_EN,
        4,
        "<<The Red Planet gets its colour from rust-like iron oxide dust.>> {{D is right.}} "
        "<<Mercury (A) has no such dust.>>\n"
        "{{Answer: 4}}",
    ),
    _case(
        "en-mars-fourth",
        PLANETS_EN,
        4,
        "{{The fourth option is the one to choose:}} <<its surface is rich in iron oxide, which "
        "looks red.>>\n"
        "{{Answer: 4}}",
    ),
    _case(
        "en-mars-heading",
        PLANETS_EN,
        4,
        "[[### Reasoning]]\n"
        "<<Iron oxide dust makes the surface of Mars look red.>> <<Earth looks blue from space "
        "because of its oceans.>>\n"
        "\n"
        "{{### Answer}}\n"
        "{{4. Mars}}",
    ),
    _case(
        "en-mars-answer-colon-reason",
        PLANETS_EN,
        4,
        "{{The answer is 4:}} <<iron oxide on the surface of Mars gives it a red colour.>>\n"
        "{{Answer: 4}}",
    ),
    _case(
        "en-math",
        SUMS,
        3,
        "<<Adding two and two gives four.>> {{The correct choice is 3 (4).}}\n{{Answer: 3}}",
    ),
    _case(
        "en-math-text-right",
        SUMS,
        3,
        "<<Two plus two makes four.>> {{Hence 4 is correct.}}\n{{Answer: 3}}",
    ),
    _case(
        "en-answer-key-aside",
        MINERALS_EN,
        2,
        "<<Calcium phosphate is the main component of bone mineral>> {{— that is why B is the "
        "answer}}. <<Sodium is an electrolyte.>>\n"
        "{{Answer: 2}}",
    ),
    _case(
        "en-go-with",
        MINERALS_EN,
        2,
        "<<Teeth and bones are hardened by calcium salts.>> {{I would go with B.}}\n{{Answer: 2}}",
    ),
    _case(
        "en-not-correct-distractor",
        MINERALS_EN,
        2,
        "<<A is not correct because iron belongs to haemoglobin.>> <<C and D are electrolytes, "
        "not structural minerals.>> <<Calcium forms the hard part of bone.>>\n"
        "{{Answer: 2}}",
    ),
    _case(
        "en-boxed",
        MINERALS_EN,
        2,
        "<<Calcium is the main mineral of bone.>>\n\n{{The final answer is $\\boxed{B}$.}}",
    ),
    _case(
        "ko-plain",
        MINERALS_KO,
        2,
        "<<칼슘은 뼈와 치아의 주성분이다.>> <<철은 헤모글로빈의 성분이므로 틀리다.>> <<나트륨과 "
        "칼륨은 체액의 전해질이다.>>\n"
        "{{정답: ②}}",
    ),
    _case(
        "ko-plain-list",
        MINERALS_KO,
        2,
        "1. <<철은 적혈구에서 산소를 운반하는 헤모글로빈의 성분이다.>>\n"
        "2. <<칼슘은 뼈와 치아를 단단하게 하는 인산칼슘의 성분이다.>>\n"
        "3. <<나트륨은 세포 밖 체액의 주된 양이온이다.>>\n"
        "4. <<칼륨은 세포 안 체액의 주된 양이온이다.>>\n"
        "\n"
        "{{정답: ②}}",
    ),
    _case(
        "en-plain",
        MINERALS_EN,
        2,
        "<<Calcium phosphate makes bones hard.>> <<Iron is wrong: it is found in haemoglobin.>> "
        "<<Sodium and potassium are electrolytes, so they do not build bone.>>\n"
        "{{Answer: 2}}",
    ),
    _case(
        "en-to-answer-this",
        PLANETS_EN,
        4,
        "<<To answer this, recall which planet has iron oxide on its surface.>> <<That planet is "
        "Mars, which looks red in the night sky.>>\n"
        "\n"
        "{{Answer: 4}}",
    ),
    _case(
        "ko-distractor-wrong-answer-word",
        MINERALS_KO,
        2,
        "<<①은 철이므로 오답이다.>> <<칼슘은 뼈의 주성분이다.>> <<③과 ④는 전해질이므로 뼈를 "
        "이루지 않는다.>>\n"
        "{{정답: ②}}",
    ),
    _case(
        "ko-negative-question-plain",
        STATEMENTS_KO,
        3,
        "<<① 물은 1기압에서 100 °C에 끓으므로 옳은 설명이다.>> <<② 빛은 진공에서도 전파되므로 "
        "옳다.>> <<③ 소리는 진공에서 전파되지 않으므로 틀린 설명이다.>> <<④ 얼음은 물보다 밀도가 "
        "작다.>>\n"
        "{{정답: ③}}",
    ),
    _case(
        "ko-reason-then-verdict-comma",
        MINERALS_KO,
        2,
        "<<철은 혈액에, 나트륨과 칼륨은 체액에 주로 있으므로,>> {{뼈의 주성분으로 알맞은 것은 ② "
        "칼슘이다.}}\n"
        "{{정답: ②}}",
    ),
    _case(
        "en-because-first",
        MINERALS_EN,
        2,
        "<<Because bone mineral is mostly calcium phosphate,>> {{the correct option is B.}}\n"
        "{{Answer: 2}}",
    ),
    _case(
        "ko-answer-selected",
        CITIES_KO,
        2,
        "<<수도는 국가의 중앙 정부가 있는 도시다.>> <<정부 서울청사와 국회가 서울에 있다.>> "
        "{{그래서 ②번을 택한다.}}\n"
        "\n"
        "{{정답: ②}}",
    ),
    _case(
        "en-which-is",
        MINERALS_EN,
        2,
        "{{The answer is B, which is calcium.}} <<Bones are made hard by calcium phosphate.>>\n"
        "{{Answer: 2}}",
    ),
    _case(
        "en-letter-right-choice",
        MINERALS_EN,
        2,
        "<<Potassium is mostly inside cells, and sodium mostly outside them.>> <<Neither is "
        "stored in bone in large amounts.>> {{(B) is the right choice.}}\n"
        "{{Answer: 2}}",
    ),
    _case(
        "ko-parenthesis-line",
        MINERALS_KO,
        2,
        "<<칼슘은 뼈와 치아의 주성분이다.>> <<철은 헤모글로빈의 성분이다.>>\n{{(정답: ② 칼슘)}}",
    ),
    _case(
        "en-numbered-steps",
        MINERALS_EN,
        2,
        "1. <<Bone mineral is hydroxyapatite.>>\n"
        "2. <<Hydroxyapatite is a calcium phosphate.>>\n"
        "3. {{Thus, option 2 is correct.}}\n"
        "\n"
        "{{Answer: 2}}",
    ),
    _case(
        "ko-short-label-text",
        CITIES_KO,
        2,
        "<<국회와 대통령실이 있는 도시가 수도이다.>> <<부산과 인천, 대구에는 이런 기관이 없다.>>"
        "\n"
        "{{답: 서울}}",
    ),
    # Written apart from the hider: reasoning with words that hold an answer word without
    # being one (들어맞다, 알맞지 않다, 맞서다, 맞추다, 정답률, 옳고 그름, "right-hand side"),
    # and statements in forms the first cases lack.
    _case(
        "ko-founder-fits",
        FOUNDERS_KO,
        2,
        "<<고구려는 기원전 37년 졸본에서 세워졌다.>> <<② 주몽은 부여에서 내려와 졸본에서 나라를 "
        "세웠으므로 문제의 조건에 들어맞는다.>> <<① 온조는 주몽의 아들로 한강 유역에 백제를 "
        "세웠으니 조건에 들어맞지 않는다.>> <<③ 박혁거세는 경주 지역에서 신라를 세웠고, 이후 "
        "신라는 고구려에 맞서는 세력이 되었다.>> <<④ 김수로는 금관가야를 세운 왕이다.>> {{따라서 "
        "조건에 모두 들어맞는 것은 ② 주몽이다.}}\n"
        "{{정답: ②}}",
        trap=True,
    ),
    _case(
        "ko-founder-answer-rate",
        FOUNDERS_KO,
        2,
        "<<이 문항은 정답률이 낮은 편으로, 백제와 고구려의 건국 이야기를 헷갈리기 쉽다.>> "
        "<<오답률이 가장 높은 ① 온조는 주몽의 아들로, 한강 유역에 백제를 세웠다.>> <<② 주몽은 "
        "부여를 떠나 졸본에서 고구려를 세웠으므로 문제에 들어맞는다.>> <<③ 박혁거세는 신라를, ④ "
        "김수로는 금관가야를 세웠다.>> <<옳고 그름을 따지면 건국 순서도 중요한데, 신라가 기원전 "
        "57년으로 가장 먼저 세워졌다.>> {{해답은 ② 주몽이다.}}\n"
        "{{정답: ②}}",
        trap=True,
    ),
    _case(
        "ko-equation-check",
        EQUATIONS_KO,
        2,
        "<<일차방정식 2x + 3 = 7에서 양변에서 3을 빼면 2x = 4이다.>> <<양변을 2로 나누면 x = 2를 "
        "얻는다.>> <<검산을 위해 x = 2를 대입하면 좌변은 2 \u00d7 2 + 3 = 7로 우변과 "
        "들어맞는다.>> <<① "
        "x = 1을 넣으면 좌변이 5가 되어 등식이 성립하지 않는다.>> <<③과 ④는 좌변이 각각 9와 11이 "
        "되므로 알맞지 않다.>> {{답으로 알맞은 것은 ②이다.}}\n"
        "{{정답: ②}}",
        trap=True,
    ),
    _case(
        "ko-fractions-answer-rate",
        FRACTIONS,
        2,
        "<<분모가 다른 분수를 더할 때는 먼저 분모를 최소공배수인 6으로 맞춘다.>> <<1/2은 3/6, "
        "1/3은 2/6이 되므로 합은 5/6이다.>> <<이 문항은 정답률이 낮은 편인데, 분자끼리와 분모끼리 "
        "더하는 실수가 잦기 때문이다.>> <<오답률이 가장 높은 ①의 2/5가 바로 그런 실수로 나온 "
        "값이다.>> <<③ 1/6은 두 분수를 곱한 값이다.>> {{②가 가장 알맞다.}}\n"
        "{{정답: ②}}",
        trap=True,
    ),
    _case(
        "ko-spelling-right-wrong",
        SPELLING_KO,
        2,
        "<<'며칠'은 [며칠]로 소리 나며 어원이 분명하지 않으므로 소리대로 적는다.>> <<옳고 그름을 "
        "따지면, ①의 '몇일'은 표준어 규정에 맞지 않는 표기이다.>> <<④ '몇칠'은 소리를 따라 적은 "
        "듯하지만 한글 맞춤법에 알맞지 않다.>> <<③ '몇 일'처럼 띄어 써도 올바른 표기가 되지는 "
        "않는다.>> {{고를 보기는 ②이다.}}\n"
        "{{정답: ②}}",
        trap=True,
    ),
    _case(
        "ko-grammar-particle",
        PARTICLES_KO,
        3,
        "<<'맞서다'는 누구와 맞서는지를 나타내는 말이 필요한 서술어이다.>> <<'친구와'의 '와'는 "
        "'친구'를 서술어에 이어 상대를 나타낸다.>> <<① 주격 조사는 문장의 주어를 나타내므로 이 "
        "문장에 알맞지 않다.>> <<② 목적격 조사는 목적어를 만들며, 받침에 맞추어 '을'이나 '를'로 "
        "쓴다.>> <<④ 보조사는 '도', '만'처럼 특별한 뜻을 더한다.>> {{그러므로 ③ 부사격 조사가 "
        "가장 적절하다.}}\n"
        "{{정답: ③}}",
        trap=True,
    ),
    _case(
        "ko-gas-limewater",
        GASES_KO,
        2,
        "<<석회수에 이산화 탄소를 통과시키면 탄산 칼슘 앙금이 생겨 뿌옇게 흐려진다.>> <<실험 "
        "결과는 ② 이산화 탄소의 성질과 정확히 들어맞는다.>> <<① 산소는 물질이 타는 것을 돕지만 "
        "석회수와 반응하지 않는다.>> <<④ 수소는 불을 붙이면 소리를 내며 탄다.>> <<질문에 대한 "
        "학생들의 대답을 보면 ③ 질소를 떠올린 경우도 있었는데, 질소는 반응성이 작다.>> {{해답은 "
        "②이다.}}\n"
        "{{정답: ②}}",
        trap=True,
    ),
    _case(
        "ko-acid-litmus",
        ACIDITY_KO,
        2,
        "<<산성 용액은 푸른 리트머스 종이를 붉게 바꾼다.>> <<식초에는 아세트산이 들어 있어 pH가 "
        "약 3이다.>> <<① 비눗물과 ③ 암모니아수, ④ 석회수는 모두 염기성이어서 붉은 리트머스 종이를 "
        "푸르게 바꾼다.>> <<실험 결과를 표와 맞추어 보면 식초만 산성의 조건에 들어맞는다.>> "
        "{{따라서 ② 식초를 선택하면 된다.}}\n"
        "{{정답: ②}}",
        trap=True,
    ),
    _case(
        "ko-net-force",
        MOTION_KO,
        2,
        "<<관성 법칙에 따르면 알짜힘이 0이면 물체의 운동 상태가 변하지 않는다.>> <<이 문항의 "
        "정답률이 낮은 까닭은 힘이 없으면 멈춘다는 직관 때문이다.>> <<① 속력이 빨라지려면 운동 "
        "방향으로 알짜힘이 작용해야 한다.>> <<③은 알짜힘이 운동 반대 방향일 때의 일이라 조건에 "
        "들어맞지 않는다.>> <<④ 운동 방향이 바뀌려면 옆 방향의 힘이 필요하다.>> <<계산 결과도 "
        "실험값과 맞아떨어진다.>> {{따라서 ②번이 가장 옳다.}}\n"
        "{{정답: ②}}",
        trap=True,
    ),
    _case(
        "ko-english-verb",
        VERBS_EN,
        2,
        "<<주어 She는 3인칭 단수이고 every day는 반복되는 습관을 나타내므로 현재 시제를 쓴다.>> "
        "<<3인칭 단수 현재형은 동사에 -es를 붙여 주어와 수를 맞춘다.>> <<① go는 주어와 수가 맞지 "
        "않는다.>> <<③ going은 be동사 없이 쓸 수 없으므로 문법적으로 알맞지 않다.>> <<④ went는 "
        "과거형이라 every day와 시제가 맞지 않는다.>> {{빈칸에 들어갈 말로 가장 알맞은 것은 ② "
        "goes이다.}}\n"
        "{{정답: ②}}",
        trap=True,
    ),
    _case(
        "ko-english-vocabulary",
        VOCABULARY_EN,
        1,
        "<<빈칸 뒤에 each other가 있으므로 '서로 맞서다'라는 뜻의 동사가 필요하다.>> <<① face는 "
        "동사로 쓰이면 '~에 맞서다, 직면하다'를 뜻한다.>> <<② fact와 ④ fame은 명사이고, ③ faith도 "
        "명사라서 동사 자리에 알맞지 않다.>> <<will 뒤에는 동사원형이 와야 시제와 형태가 "
        "들어맞는다.>> {{①을 고르면 된다.}}\n"
        "{{정답: ①}}",
        trap=True,
    ),
    _case(
        "en-equation-right-hand-side",
        EQUATIONS_EN,
        3,
        "<<Add 2 to both sides: 3x = 12.>> <<Dividing by 3 gives x = 4.>> <<Check option C: "
        "with x = 4 the left-hand side is 3 · 4 - 2 = 10, and the right-hand side is 10.>> <<In "
        "option B the right-hand side would have to be 7, so it fails.>> <<Read correctly, the "
        "equation has exactly one solution.>> {{The best choice here is C.}}\n"
        "{{Answer: 3}}",
        trap=True,
    ),
    _case(
        "en-founder-answers-the-question",
        FOUNDERS_EN,
        2,
        "<<Goguryeo was founded in 37 BC at Jolbon.>> <<The Samguk sagi answers the question of "
        "who led the people from Buyeo to Jolbon.>> <<Read correctly, option A describes Onjo, "
        "who went south and founded Baekje instead.>> <<Bak Hyeokgeose (C) founded Silla, and Kim "
        "Suro (D) founded Geumgwan Gaya.>> {{So B is correct.}}\n"
        "{{Answer: 2}}",
        trap=True,
    ),
    _case(
        "en-limewater-right-hand-side",
        GASES_EN,
        2,
        "<<Limewater is a solution of calcium hydroxide.>> <<Carbon dioxide reacts with it to form "
        "insoluble calcium carbonate, which turns it milky.>> <<Done correctly, the test with "
        "option A leaves the limewater clear, since oxygen does not react with it.>> <<For option "
        "B the right-hand side of the equation shows calcium carbonate and water.>> {{The best "
        "choice here is B.}}\n"
        "{{Answer: 2}}",
        trap=True,
    ),
)
