"""Rule-based inverse text normalisation: tables of expected rewrites and of text left alone."""

import random

import pytest

from qwen3asr.itn import inverse_normalize
from qwen3asr.languages import LanguageError

CHINESE = [
    # cardinals
    ("一百二十三", "123"),
    ("两千零五", "2005"),
    ("一万三千", "13000"),
    ("十五", "15"),
    ("三亿", "300000000"),
    ("三万五", "35000"),
    ("一百五十个人", "150个人"),
    ("一千零十", "1010"),
    ("两万零三百", "20300"),
    ("一亿两千万", "120000000"),
    ("共有一万两千三百四十五人", "共有12345人"),
    ("他今年二十五岁", "他今年25岁"),
    ("三十多个", "30多个"),
    ("一百八十度", "180度"),
    # decimals, percentages, negatives
    ("三点一四", "3.14"),
    ("零点五", "0.5"),
    ("一点五公斤", "1.5公斤"),
    ("三点零五", "3.05"),
    ("百分之二十五", "25%"),
    ("百分之三点五", "3.5%"),
    ("百分之零点五", "0.5%"),
    ("百分之百的把握", "100%的把握"),
    ("千分之五", "5‰"),
    ("零下五度", "零下5度"),
    ("负三度", "-3度"),
    # dates
    ("二零二四年三月五日", "2024年3月5日"),
    ("三月五号", "3月5号"),
    ("一九九八年", "1998年"),
    ("九八年", "98年"),
    ("十一月十一日", "11月11日"),
    ("一月一日", "1月1日"),
    ("我们五号见", "我们5号见"),
    # clock times (characters kept)
    ("下午三点十五分", "下午3点15分"),
    ("八点半", "8点半"),
    ("三点十分出发", "3点10分出发"),
    ("三点零五分", "3点05分"),
    ("十二点整", "12点整"),
    ("凌晨两点", "凌晨2点"),
    ("下午一点见", "下午1点见"),
    ("九点钟", "9点钟"),
    ("一点半", "1点半"),
    # digit strings
    ("幺三八", "138"),
    ("一三八零零一三八零零零", "13800138000"),
    ("电话是一三九幺二三四五六七八", "电话是13912345678"),
    ("房间号三零二", "房间号302"),
    ("二〇二四年", "2024年"),
    # quantities, ranges, money
    ("我有三个苹果", "我有3个苹果"),
    ("两个人", "2个人"),
    ("十分钟后", "10分钟后"),
    ("她花了三块钱", "她花了3块钱"),
    ("三块五", "3块5"),
    ("三到五个", "3到5个"),
    ("二十到三十岁", "20到30岁"),
    ("第二十三届", "第23届"),
    ("六月的天气", "6月的天气"),
    # mixed with other text and punctuation
    ("今天是二零二四年，我三十岁。", "今天是2024年，我30岁。"),
    ("温度：零下十二度！", "温度：零下12度！"),
]

CHINESE_UNCHANGED = [
    "一些",
    "一下",
    "一起",
    "一样",
    "统一",
    "万一",
    "一般",
    "第一",
    "第三个",
    "第十名",
    "一个人",
    "快一点",
    "一点儿",
    "一点一点地",
    "千万不要",
    "他十分高兴",
    "三四个人",
    "一两个人",
    "二三十个",
    "五六十岁",
    "十几个",
    "几十个人",
    "二十几岁",
    "一五一十",
    "乱七八糟",
    "三番五次",
    "十万火急",
    "八九不离十",
    "七零八落",
    "三十而立",
    "五角大楼",
    "星期三",
    "周一",
    "三明治",
    "四川",
    "零件",
    "负数",
    "十字路口",
    "九九乘法表",
    "一心一意",
    "一模一样",
    "十全十美",
    "百分百",
    "一石二鸟",
    "独一无二",
]

ENGLISH = [
    # cardinals
    ("twenty three", "23"),
    ("one hundred and five", "105"),
    ("one hundred twenty three", "123"),
    ("one hundred", "100"),
    ("nineteen hundred", "1900"),
    ("three million", "3000000"),
    ("one million two hundred thousand", "1200000"),
    ("nine hundred ninety nine thousand nine hundred ninety nine", "999999"),
    ("two thousand and five", "2005"),
    ("a hundred and fifty", "150"),
    ("a thousand two hundred", "1200"),
    ("ten", "10"),
    ("eleven people", "11 people"),
    ("I have ten reasons", "I have 10 reasons"),
    ("ninety nine bottles", "99 bottles"),
    ("He is thirty-one years old.", "He is 31 years old."),
    ("Twenty-three apples, and forty-two pears.", "23 apples, and 42 pears."),
    ("It costs twenty dollars and fifty cents.", "It costs 20 dollars and 50 cents."),
    ("one hundred and", "100 and"),
    # decimals and percentages
    ("three point one four", "3.14"),
    ("zero point five", "0.5"),
    ("version two point oh", "version 2.0"),
    ("twenty five percent", "25%"),
    ("seventy-five percent", "75%"),
    ("fifty per cent", "50%"),
    ("five percent", "5%"),
    ("one percent of them", "1% of them"),
    ("three point five percent", "3.5%"),
    ("a hundred percent", "100%"),
    # years
    ("two thousand twenty four", "2024"),
    ("nineteen ninety eight", "1998"),
    ("twenty twenty", "2020"),
    ("in twenty twenty four we met", "in 2024 we met"),
    ("nineteen oh five", "1905"),
    # clock times
    ("at seven thirty", "at 7:30"),
    ("at eleven fifteen", "at 11:15"),
    ("by nine oh five", "by 9:05"),
    ("meet me at six thirty pm", "meet me at 6:30 pm"),
    ("seven pm", "7 pm"),
    ("twelve o'clock", "12 o'clock"),
    ("it's one o'clock", "it's 1 o'clock"),
    ("at eight forty five a.m.", "at 8:45 a.m."),
    # digit strings
    ("one two three four", "1234"),
    ("one oh one", "101"),
    ("my number is four one five five five five one two one two", "my number is 4155551212"),
    ("code zero zero seven", "code 007"),
    # ordinals
    ("twenty first", "21st"),
    ("the twenty first century", "the 21st century"),
    ("one hundredth anniversary", "100th anniversary"),
    ("the tenth time", "the 10th time"),
    ("her thirty second birthday", "her 30 second birthday"),  # "second" is the time unit
    ("the forty third president", "the 43rd president"),
    ("the eleventh hour", "the 11th hour"),
    ("the twentieth", "the 20th"),
    # spacing and punctuation around spans
    ("twenty  three", "23"),
    ("(twenty three)", "(23)"),
    ("twenty three, twenty four.", "23, 24."),
]

ENGLISH_UNCHANGED = [
    "one of them",
    "someone often a one-off",
    "no one came",
    "one by one",
    "the one and only",
    "One day we left.",
    "two people",
    "two three",
    "one two",
    "seven thirty",
    "a hundred times",
    "a thousand",
    "a million reasons",
    "one third of the pie",
    "the first time",
    "the second day",
    "hundreds of people",
    "thousands",
    "two and three",
    "rock and roll",
    "one and a half",
    "point five",
    "at this point one must wait",
    "the point is",
    "oh no",
    "oh one",
    "zero",
    "twenty-second",
    "three-quarters",
    "often tone phone honest",
    "Oneida and Tenerife",
    "weight, height, eighth-grade",
    "it's the one's turn",
    "nine lives",
    "four score",
    "and then there were none",
    "between the two of us",
    "five",
    "a one-time fee",
    "Seven Samurai",
]


@pytest.mark.parametrize("spoken, written", CHINESE)
def test_chinese(spoken, written):
    assert inverse_normalize(spoken, "Chinese") == written
    assert inverse_normalize(spoken) == written  # language detected per span


@pytest.mark.parametrize("text", CHINESE_UNCHANGED)
def test_chinese_unchanged(text):
    assert inverse_normalize(text, "Chinese") == text


@pytest.mark.parametrize("spoken, written", ENGLISH)
def test_english(spoken, written):
    assert inverse_normalize(spoken, "English") == written
    assert inverse_normalize(spoken) == written


@pytest.mark.parametrize("text", ENGLISH_UNCHANGED)
def test_english_unchanged(text):
    assert inverse_normalize(text, "English") == text


def test_table_sizes():
    assert len(CHINESE) + len(CHINESE_UNCHANGED) >= 50
    assert len(ENGLISH) + len(ENGLISH_UNCHANGED) >= 50


def test_mixed_text_is_handled_span_by_span():
    text = "我买了三个apple, twenty five percent off，花了百分之二十五。"
    assert inverse_normalize(text) == "我买了3个apple, 25% off，花了25%。"


def test_language_selects_rules():
    text = "三个 twenty three"
    assert inverse_normalize(text, "Chinese") == "3个 twenty three"
    assert inverse_normalize(text, "Cantonese") == "3个 twenty three"
    assert inverse_normalize(text, "English") == "三个 23"
    assert inverse_normalize(text, "en") == "三个 23"
    assert inverse_normalize(text, "Japanese") == text  # no rules: unchanged
    assert inverse_normalize(text, None) == "3个 23"


def test_bad_arguments():
    with pytest.raises(LanguageError, match=r"unsupported language 'Klingon'; accepted: Chinese \(zh\)"):
        inverse_normalize("three", "Klingon")
    with pytest.raises(ValueError, match=r"needs a str, got bytes"):
        inverse_normalize(b"three")


def test_empty_and_digits_already():
    assert inverse_normalize("") == ""
    assert inverse_normalize("I have 3 apples, 我有3个") == "I have 3 apples, 我有3个"


# Property: text made only of non-number material comes back unchanged, whitespace included.
_NUMBER_CHARS = set("零〇一二两三四五六七八九十百千万亿幺")
_CJK = [chr(c) for c in range(0x4E00, 0x4E00 + 3000) if chr(c) not in _NUMBER_CHARS] + list("点第负分之几数年月日号个半钟")
_WORDS = (
    "the of and a an point percent per cent at by to oh well often someone phone tone none alone "
    "money honest lonely weight height eightfold seconds hundreds thousands millions dozen twice once "
    "minus half quarter am pm o'clock first-class one-off".split()
)
_NUMBER_WORDS = set(
    "zero oh one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand million "
    "billion trillion first third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth".split()
)
_PUNCT = list(" ,.!?;:()\"'-—，。！？、：；（）") + ["  ", "\t", "\n"]


def _random_text(rng: random.Random) -> str:
    pieces = []
    for _ in range(rng.randint(1, 30)):
        kind = rng.random()
        if kind < 0.35:
            pieces.append("".join(rng.choice(_CJK) for _ in range(rng.randint(1, 4))))
        elif kind < 0.6:
            word = rng.choice(_WORDS)
            pieces.append(word.capitalize() if rng.random() < 0.2 else word)
        elif kind < 0.75:
            word = "".join(rng.choice("bcdfghjklmnopqrstvwxyzaeiu") for _ in range(rng.randint(1, 7)))
            if word not in _NUMBER_WORDS:
                pieces.append(word)
        else:
            pieces.append(rng.choice(_PUNCT))
        pieces.append(rng.choice([" ", " ", "", ", "]))
    return "".join(pieces)


def test_text_without_numbers_is_unchanged():
    rng = random.Random(1234)
    for _ in range(3000):
        text = _random_text(rng)
        assert inverse_normalize(text) == text, text
