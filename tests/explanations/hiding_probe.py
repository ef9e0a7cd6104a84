"""A probe of explanations for the hider, written independently of it.

The cases were written by someone who had not read the hider, the answer reader or their tests,
only the markup of ``tests.explanations.hiding_corpus``: ``{{…}}`` a statement of the answer,
``<<…>>`` reasoning that must reach the verifier as written, ``[[…]]`` a neutral heading, and
text outside the marks layout only.

It holds 16 explanations (12 in Korean, 4 in English) on Korean history, mathematics, biology,
Korean grammar, physics, English reading and geography. Their reasoning leans on words that
contain an answer word without being a statement (들어맞다, 알맞은 조건, 맞서다, 맞추다,
정답률, 오답률, 옳고 그름, 모범 해답, 대답, 맞은편, 답답하다, "correctly", "right-hand
side", "right angle", "answers the question of", "the correct use of", "answering"), and
their statements take forms such as "답으로 알맞은 것은 ②이다", "고를 보기는 ②이다",
"따라서 ④를 고르면 된다", "The best choice here is B" and "Pick D.".
"""

from __future__ import annotations

from tests.explanations.hiding_corpus import Case

# 흥선 대원군이 추진한 정책으로 옳은 것은? (①)
HEUNGSEON_KO = (
    "서원을 대폭 정리하였다",
    "규장각을 설치하였다",
    "대동법을 처음 실시하였다",
    "훈민정음을 창제하였다",
)
IMJIN_KO = ("권율", "김시민", "이순신", "곽재우")  # 임진왜란 때 한산도 대첩을 이끈 인물은? (③)
ROOT_SUMS = ("-5", "-6", "1", "5", "6")  # 이차방정식 x^2 - 5x + 6 = 0의 두 근의 합은? (④)
HYPOTENUSES = ("7", "10", "12", "14")  # 직각을 낀 두 변이 6, 8인 직각삼각형의 빗변은? (②)
# 단백질을 가장 먼저 분해하는 효소는? (②)
ENZYMES_KO = ("아밀레이스", "펩신", "라이페이스", "트립신")
# Rr 잡종 1대를 자가 수분했을 때 잡종 2대의 둥근 완두 : 주름진 완두는? (②)
RATIOS = ("1:1", "3:1", "2:1", "1:3")
WORD_CLASSES_KO = ("달리다", "먹다", "답답하다", "읽다")  # 품사가 형용사인 것은? (③)
# 객체 높임 표현이 쓰인 문장은? (②)
HONORIFICS_KO = (
    "할머니께서 주무신다.",
    "선생님께 책을 드렸다.",
    "아버지께서 진지를 드신다.",
    "교장 선생님의 말씀이 있으시겠습니다.",
)
# 책상 위에 정지해 있는 책에 작용하는 중력과 작용 반작용 관계인 힘은? (②)
FORCES_KO = (
    "책상이 책을 떠받치는 힘",
    "책이 지구를 당기는 힘",
    "책이 책상을 누르는 힘",
    "지구가 책상을 당기는 힘",
)
# 우리나라 서해안의 특징으로 옳지 않은 것은? (③)
COASTS_KO = (
    "조차가 크다",
    "갯벌이 넓게 발달하였다",
    "해안선이 단조롭다",
    "섬이 많고 해안선이 복잡하다",
)
# 다음 글(잠과 기억)의 주제로 가장 적절한 것은? (①)
TOPICS_EN = (
    "the role of sleep in forming memories",
    "the effect of sleep loss on mood",
    "ways to fall asleep faster",
    "the history of sleep research",
)
DICE = ("1/12", "1/9", "1/6", "7/36", "1/3")  # 주사위 두 개의 눈의 합이 7일 확률은? (③)
# In a right triangle one acute angle is 35 degrees. The other acute angle? (C)
ANGLES_EN = ("35 degrees", "45 degrees", "55 degrees", "65 degrees", "145 degrees")
# 2-ohm and 4-ohm resistors in series across a 12 V battery: the current? (B)
CURRENTS_EN = ("1 A", "2 A", "3 A", "6 A")
# Which sentence uses "its" or "it's" correctly? (D)
ITS_EN = (
    "The dog wagged it's tail.",
    "Its going to rain today.",
    "Its' colour faded quickly.",
    "The company lost its biggest client.",
)
# Which title best fits the passage (on autumn leaves)? (B)
TITLES_EN = (
    "How Trees Store Water",
    "Why Leaves Turn Red and Yellow",
    "The Best Forests for Autumn Hikes",
    "Chlorophyll in the Human Diet",
)

PROBE: list[Case] = [
    Case(
        name="probe-ko-history-heungseon",
        choices=HEUNGSEON_KO,
        key=1,
        marked="[[해설]]\n"
        "<<흥선 대원군은 1863년 고종이 즉위하자 실권을 잡고 왕권을 강화하는 개혁을 "
        "추진하였다.>> <<각 보기의 옳고 그름을 가리려면 정책이 시행된 시기를 먼저 따져 보아야 "
        "한다.>>\n"
        "- <<① 흥선 대원군은 붕당의 근거지이자 백성을 수탈하던 서원을 47곳만 남기고 "
        "정리하였다.>>\n"
        "- <<② 규장각은 정조가 1776년에 설치한 왕실 도서관이자 학문 연구 기관이다.>>\n"
        "- <<③ 대동법은 광해군 때인 1608년 경기도에서 처음 실시되었다.>>\n"
        "- <<④ 훈민정음은 세종이 1443년에 창제하였다.>>\n"
        "\n"
        "<<흥선 대원군은 또한 서양 세력의 통상 요구에 맞서 전국에 척화비를 세우고 통상 수교 "
        "거부 정책을 펼쳤다.>>\n"
        "\n"
        "{{보기 중 옳은 것은 ①이다.}}\n"
        "**{{정답: ①}}**",
        trap=True,
    ),
    Case(
        name="probe-ko-history-hansan",
        choices=IMJIN_KO,
        key=3,
        marked="<<한산도 대첩은 1592년 조선 수군이 한산도 앞바다에서 일본 수군을 크게 무찌른 "
        "싸움이다.>> <<이때 조선 수군은 좁은 견내량에 있던 적을 넓은 바다로 끌어낸 뒤 학익진으로 "
        "에워쌌다.>> <<이 문항은 정답률이 높은 편이지만, 육지에서 벌어진 대첩과 헷갈리면 틀리기 "
        "쉽다.>>\n"
        "\n"
        "<<① 권율은 행주산성에서 일본군에 맞서 싸워 이겼으므로, 바다에서 벌어진 싸움이라는 "
        "조건에 들어맞지 않는다.>>\n"
        "<<② 김시민은 1592년 진주성 전투를 이끌었다.>>\n"
        "<<④ 곽재우는 경상도 의령에서 일어난 의병장으로, 붉은 옷을 입어 홍의 장군이라 "
        "불렸다.>>\n"
        "\n"
        "{{정답은 ③번입니다.}}",
        trap=True,
    ),
    Case(
        name="probe-ko-math-root-sum",
        choices=ROOT_SUMS,
        key=4,
        marked="### [[풀이]]\n"
        "<<모범 해답에서는 인수분해를 쓰지만, 근과 계수의 관계를 쓰면 더 빨리 풀 수 있다.>> "
        "<<x^2 - 5x + 6 = (x - 2)(x - 3)이므로 두 근은 2와 3이다.>> <<x = 2를 대입하면 4 - 10 "
        "+ 6 = 0, x = 3을 대입하면 9 - 15 + 6 = 0으로 등식이 들어맞는다.>> <<근과 계수의 관계에 "
        "따르면 두 근의 합은 -(-5)/1 = 5이고, 두 근의 곱은 6/1 = 6이다.>>\n"
        "\n"
        "<<선택지를 하나씩 살펴보면, ① -5는 일차항의 계수를 부호 그대로 옮긴 값이다.>> <<② -6은 "
        "상수항에 부호를 잘못 붙인 값이고, ⑤ 6은 두 근의 곱이다.>> <<③ 1은 두 근의 차이다.>>\n"
        "\n"
        "{{따라서 ④를 고르면 된다.}}",
        trap=True,
    ),
    Case(
        name="probe-ko-math-hypotenuse",
        choices=HYPOTENUSES,
        key=2,
        marked="<<직각삼각형에서는 피타고라스 정리에 따라 빗변의 길이의 제곱이 직각을 낀 두 변의 "
        "길이의 제곱의 합과 같다.>> <<6^2 + 8^2 = 36 + 64 = 100이므로 빗변의 길이는 100의 양의 "
        "제곱근인 10이다.>> <<6, 8, 10은 3 : 4 : 5의 비에 들어맞는 세 수이므로, 이 비를 외워 "
        "두면 계산 없이도 빗변을 구할 수 있다.>>\n"
        "\n"
        "<<오답률이 가장 높은 ④ 14는 두 변의 길이를 그냥 더한 값이다.>> <<빗변은 가장 긴 "
        "변이어야 하므로 8보다 짧은 ① 7은 조건에 들어맞지 않는다.>> <<③ 12는 제곱하면 144로 "
        "100과 다르다.>>\n"
        "\n"
        "{{②가 가장 알맞다.}}\n"
        "{{정답: ②}}",
        trap=True,
    ),
    Case(
        name="probe-ko-biology-pepsin",
        choices=ENZYMES_KO,
        key=2,
        marked="<<단백질의 소화는 위에서 시작된다.>> <<위샘에서 분비되는 펩신은 위액의 강한 산성 "
        "조건에 알맞은 효소여서, pH 2 안팎에서 가장 활발하게 작용한다.>> <<효소마다 작용하기에 "
        "알맞은 pH와 온도가 다르다는 점을 함께 기억하자.>>\n"
        "\n"
        "<<① 아밀레이스는 침과 이자액에 들어 있으며 녹말을 엿당으로 분해한다.>> <<③ 라이페이스는 "
        "이자액에 들어 있어 지방을 지방산과 모노글리세리드로 분해한다.>> <<④ 트립신도 단백질을 "
        "분해하지만, 이자액에 들어 있어 소장에서 작용하므로 '가장 먼저'라는 조건에 들어맞지 "
        "않는다.>>\n"
        "\n"
        "{{답으로 알맞은 것은 ②이다.}}",
        trap=True,
    ),
    Case(
        name="probe-ko-biology-mendel",
        choices=RATIOS,
        key=2,
        marked="### [[풀이]]\n"
        "<<잡종 1대의 유전자형은 모두 Rr이며, 둥근 모양이 우성이므로 모두 둥근 완두이다.>> "
        "<<Rr을 자가 수분하면 잡종 2대의 유전자형은 RR : Rr : rr = 1 : 2 : 1로 나온다.>> <<RR과 "
        "Rr은 둥근 완두, rr만 주름진 완두이므로 표현형의 비는 3 : 1이다.>>\n"
        "\n"
        "<<오답률이 높은 ④ 1:3은 우성과 열성을 거꾸로 맞춘 비이다.>> <<① 1:1은 잡종 1대를 "
        "주름진 완두와 검정 교배했을 때 나오는 비이고, ③ 2:1은 유전자형의 비에서 RR을 빠뜨린 "
        "것이다.>>\n"
        "\n"
        "{{고를 보기는 ②이다.}}",
        trap=True,
    ),
    Case(
        name="probe-ko-grammar-adjective",
        choices=WORD_CLASSES_KO,
        key=3,
        marked="<<형용사는 사물의 성질이나 상태를 나타내는 말이고, 동사는 움직임을 나타내는 "
        "말이다.>> <<둘을 가르는 가장 쉬운 방법은 현재형 어미 '-ㄴ다/-는다'를 붙여 보는 것이다.>> "
        "<<'답답하다'는 '답답한다'로 쓸 수 없고, 명령형 '답답해라'나 청유형 '답답하자'도 "
        "자연스럽지 않다.>> <<'가슴이 답답하다'처럼 마음이나 몸의 상태를 나타내므로 형용사의 "
        "특징에 들어맞는다.>>\n"
        "\n"
        "<<반면 ① 달리다, ② 먹다, ④ 읽다는 '달린다', '먹는다', '읽는다'로 활용하므로 "
        "동사이다.>>\n"
        "\n"
        "{{그러니 ③번을 고르세요.}}\n"
        "{{정답: ③}}",
        trap=True,
    ),
    Case(
        name="probe-ko-grammar-object-honorific",
        choices=HONORIFICS_KO,
        key=2,
        marked="{{답은 ②번 문장인데,}} <<부사격 조사 '께'와 특수 어휘 '드리다'가 함께 쓰여 서술의 "
        "객체인 '선생님'을 높이기 때문이다.>>\n"
        "\n"
        "<<객체 높임은 목적어나 부사어가 가리키는 대상을 높이는 방법으로, '드리다, 모시다, "
        "여쭙다, 뵙다' 같은 특수 어휘로 실현된다.>> <<웃어른에게 하는 대답을 높일 때 "
        "'대답했다' 대신 '말씀드렸다'를 쓰는 것도 같은 원리이다.>>\n"
        "\n"
        "<<① '주무신다'와 ③ '드신다'는 주어인 할머니와 아버지를 높이므로 주체 높임이다.>> <<④는 "
        "높여야 할 대상의 말을 높이는 간접 높임이다.>>",
        trap=True,
    ),
    Case(
        name="probe-ko-physics-action-reaction",
        choices=FORCES_KO,
        key=2,
        marked="<<작용 반작용은 두 물체가 서로 주고받는 한 쌍의 힘으로, 크기가 같고 방향이 "
        "반대이며 서로 다른 물체에 작용한다.>> <<책에 작용하는 중력은 지구가 책을 당기는 "
        "힘이므로, 그 짝은 책이 지구를 당기는 힘이다.>>\n"
        "\n"
        "<<① 책상이 책을 떠받치는 힘은 중력과 크기가 같고 방향이 반대여서 서로 맞서는 것처럼 "
        "보이지만, 두 힘이 모두 책에 작용하므로 힘의 평형 관계이다.>> <<③ 책이 책상을 누르는 "
        "힘은 ①의 반작용이다.>> <<④는 힘을 주고받는 물체가 지구와 책상이어서 책과 관계가 "
        "없다.>>\n"
        "\n"
        "<<많은 학생이 ①을 고르는데, '크기가 같고 방향이 반대'라는 조건만 맞추어 보면 평형과 "
        "작용 반작용을 구별할 수 없다.>>\n"
        "\n"
        "{{정답은 ② '책이 지구를 당기는 힘'이에요.}}",
        trap=True,
    ),
    Case(
        name="probe-ko-geography-west-coast",
        choices=COASTS_KO,
        key=3,
        marked="<<각 보기의 옳고 그름을 서해안과 동해안을 견주어 따져 보자.>>\n"
        "\n"
        "- <<① 서해는 수심이 얕아 밀물과 썰물의 차, 곧 조차가 크다.>>\n"
        "- <<② 조차가 크고 물이 얕아 썰물 때 드러나는 갯벌이 넓게 발달하였다.>>\n"
        "- <<③ 해안선이 단조로운 것은 한반도의 맞은편 해안인 동해안의 특징이다.>>\n"
        "- <<④ 서해안은 산줄기와 골짜기가 바다에 잠겨 만들어진 리아스 해안으로, 섬이 많고 "
        "해안선이 복잡하다.>>\n"
        "\n"
        "<<동해안은 태백산맥이 해안과 나란히 뻗어 있어 해안선이 곧고, 모래사장과 석호가 "
        "나타난다.>>\n"
        "\n"
        "{{따라서 옳지 않은 것은 ③이다.}}\n"
        "{{정답: ③}}",
        trap=True,
    ),
    Case(
        name="probe-ko-english-reading-topic",
        choices=TOPICS_EN,
        key=1,
        marked="<<글쓴이는 첫 문장에서 'Why do we need sleep?'이라는 질문을 던지고, 이어지는 "
        "문장들에서 그 대답을 제시한다.>> <<잠자는 동안 뇌가 낮에 배운 내용을 다시 재생하며 "
        "기억으로 굳힌다는 연구가 글의 중심 내용이다.>>\n"
        "\n"
        "<<선택지를 하나씩 살펴보면, ② 잠이 부족하면 답답하고 짜증이 난다는 내용은 글 중간에 한 "
        "번 나오지만 기억을 설명하기 위한 예시일 뿐이다.>> <<③ 빨리 잠드는 방법은 글에 나오지 "
        "않는다.>> <<④ 수면 연구의 역사는 마지막 문장에서 1950년대를 잠깐 언급하는 데 "
        "그친다.>>\n"
        "\n"
        "<<이 문항은 정답률이 낮은 편인데, 눈에 띄는 예시를 주제로 착각하는 경우가 많기 "
        "때문이다.>>\n"
        "\n"
        "{{글의 주제로 가장 적절한 것은 ①이다.}}",
        trap=True,
    ),
    Case(
        name="probe-ko-math-dice",
        choices=DICE,
        key=3,
        marked="<<두 주사위를 던질 때 나올 수 있는 모든 경우의 수는 6 \u00d7 6 = 36이다.>> <<눈의 "
        "합이 7인 경우는 (1, 6), (2, 5), (3, 4), (4, 3), (5, 2), (6, 1)의 6가지이므로 확률은 "
        "6/36 = 1/6이다.>> <<주사위 한 개에서 맞은편 면의 눈의 합도 항상 7이지만, 이 성질은 두 "
        "주사위를 던지는 이 문제와 관계가 없다.>>\n"
        "\n"
        "<<④ 7/36은 합 7을 경우의 수로 착각한 값이고, ② 1/9는 합이 5일 때의 확률이다.>> <<① "
        "1/12는 (1, 6)과 (6, 1)처럼 순서만 다른 경우를 하나로 셌을 때 나오는 3/36과 같다.>> "
        "<<⑤ 1/3은 주사위 한 개의 눈이 5 이상일 확률이다.>>\n"
        "\n"
        "{{③ 1/6을 답으로 고르면 됩니다.}}",
        trap=True,
    ),
    Case(
        name="probe-en-math-right-angle",
        choices=ANGLES_EN,
        key=3,
        marked="<<The three angles of any triangle add up to 180 degrees.>> <<In a right "
        "triangle the right angle takes 90 degrees of that, so the two acute angles share the "
        "remaining 90 degrees.>> <<Subtracting, 90 - 35 = 55 degrees.>>\n"
        "\n"
        "<<(E) 145 degrees is 180 - 35, which leaves out the right angle.>> <<(B) 45 degrees "
        "would only hold if the triangle were isosceles, and then the given angle would be 45 "
        "degrees too, not 35.>> <<(D) 65 degrees does not add up correctly: 90 + 35 + 65 = "
        "190.>> <<(A) simply repeats the angle given in the question.>>\n"
        "\n"
        "{{So the answer is (C).}}",
        trap=True,
    ),
    Case(
        name="probe-en-physics-series-circuit",
        choices=CURRENTS_EN,
        key=2,
        marked="<<In a series circuit the same current flows through every component, and the "
        "resistances add: 2 ohms + 4 ohms = 6 ohms.>> <<Write Ohm's law as V = IR: with 12 V on "
        "the left-hand side and 6 ohms times I on the right-hand side, dividing both sides by 6 "
        "gives I = 2 A.>>\n"
        "\n"
        "<<(C) 3 A is what you get by using only the 4-ohm resistor, and (D) 6 A by using only "
        "the 2-ohm one.>> <<(A) 1 A would need a total resistance of 12 ohms.>> <<To check "
        "that the current was found correctly, the voltage drops of 2 A times 2 ohms = 4 V and "
        "2 A times 4 ohms = 8 V add back up to 12 V.>>\n"
        "\n"
        "{{The best choice here is B.}}\n"
        "{{Answer: 2}}",
        trap=True,
    ),
    Case(
        name="probe-en-grammar-its",
        choices=ITS_EN,
        key=4,
        marked='<<This question tests the correct use of "its" and "it\'s".>> <<"It\'s" '
        'is a contraction of "it is" or "it has", while "its" is the possessive form and '
        "never takes an apostrophe.>> <<When answering questions like this, expand every "
        '"it\'s" to "it is" and see whether the sentence still makes sense.>>\n'
        "\n"
        '- <<(A) would read "wagged it is tail", so the possessive "its" is needed '
        "there.>>\n"
        '- <<(B) means "It is going to rain today", so it needs the contraction "It\'s".>>\n'
        '- <<(C) "Its\'" is not a form English uses at all.>>\n'
        '- <<In (D), "its" shows that the client belongs to the company, and no apostrophe '
        "is needed.>>\n"
        "\n"
        "{{Pick D.}}",
        trap=True,
    ),
    Case(
        name="probe-en-reading-title",
        choices=TITLES_EN,
        key=2,
        marked="**[[Explanation]]**\n"
        "\n"
        "<<The passage answers the question of why leaves change colour in autumn.>> <<It "
        "explains that as the days shorten, trees stop making green chlorophyll, so the yellow "
        "pigments that were there all along become visible, and some trees also make new red "
        "pigments.>>\n"
        "\n"
        "<<Option A picks up on a detail: the passage mentions water only when it describes "
        "how a tree seals off its leaves.>> <<Option C is about hiking, which the passage never "
        "mentions.>> <<Option D misreads the word chlorophyll; the passage says nothing about "
        "what people eat.>>\n"
        "\n"
        "{{I would go with B.}}\n"
        "{{Answer: B}}",
        trap=True,
    ),
]
