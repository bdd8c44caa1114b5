"""Rule-based inverse text normalisation (ITN): spoken numbers in transcripts to digits.

``inverse_normalize("我有三个苹果，花了百分之二十五")`` -> ``"我有3个苹果，花了25%"``;
``inverse_normalize("twenty five percent of one hundred and five")`` -> ``"25% of 105"``.

Standard library only. Text that is not a number is copied unchanged, including
all punctuation and spacing. The rules are deliberately conservative: where a
reading is ambiguous the words stay as words. The decisions (docs/itn.md):

Chinese
- Multi-character numbers always become digits: 一百二十三 -> 123, 两千零五 -> 2005,
  一万三千 -> 13000, 三万五 -> 35000 (colloquial abbreviation), 三亿 -> 300000000.
- Digit strings read one by one (3+ digits; 2 digits only with 零/幺 or before 年):
  一三八零零一三八零零零 -> 13800138000, 幺三八 -> 138, 二零二四年 -> 2024年.
- A lone numeral (二..九, 两, 十) becomes a digit only before a measure word or
  unit (三个 -> 3个, 两点 -> 2点, 十天 -> 10天). A lone 一 stays, except in dates
  and clock times (一月 -> 1月, 三月一日 -> 3月1日, 下午一点 -> 下午1点, 一点半 -> 1点半);
  so 一些, 一下, 一起, 一样, 统一, 万一, 一般, 一点 (a little) are untouched.
  A lone 零 always stays (零下, 零件).
- After 第 a lone numeral stays (第一, 第三个); longer ones convert (第二十三届 -> 第23届).
- Times keep their characters: 下午三点十五分 -> 下午3点15分, 八点半 -> 8点半,
  三点零五分 -> 3点05分. Without 分, X点<digits> is a decimal (三点一四 -> 3.14,
  三点零五 -> 3.05), X点<number with 十> is a time (三点十五 -> 3点15).
- 百分之二十五 -> 25%, 百分之三点五 -> 3.5%, 百分之百 -> 100%, 千分之五 -> 5‰, 负三 -> -3.
- Ranges convert both ends if either converts: 三到五个 -> 3到5个. Approximate
  counts (三四个, 七八十, 一两个, 二三十) and idioms (一五一十, 乱七八糟, 三番五次,
  十万火急, 千万, 十分 "very") stay as they are.

English
- Cardinals: twenty three -> 23, one hundred and five -> 105, two thousand twenty
  four -> 2024, three million -> 3000000. Single words zero..nine stay words
  ("one of them", "no one", "two people") unless followed by percent, am/pm or
  o'clock, or part of a longer number; ten and above become digits.
- "a hundred"/"a thousand" alone stay; with more words they convert (a hundred and
  fifty -> 150).
- Decimals: three point one four -> 3.14; percent: twenty five percent -> 25%.
- Two-digit pairs are years: nineteen ninety eight -> 1998, twenty twenty four -> 2024,
  nineteen oh five -> 1905. An hour and minutes are a time only after at/by/until/...
  or before am/pm/o'clock: at seven thirty -> at 7:30; otherwise they stay.
- Three or more single digits (with "oh"/zero) are a digit string: one two three four
  -> 1234, one oh one -> 101. Two single digits stay ("two three").
- Ordinals: twenty first -> 21st, one hundredth -> 100th, tenth -> 10th; first..ninth
  stay words; fractions like "one third" stay. "second" is always the time unit.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from .languages import resolve_language

logger = logging.getLogger(__name__)

__all__ = ["inverse_normalize", "inverse_normalize_chinese", "inverse_normalize_english"]


def inverse_normalize(text: str, language: Optional[str] = None) -> str:
    """Rewrite spoken numbers in ``text`` as digits.

    language: "Chinese" (also "Cantonese"), "English", or None to apply both rule
    sets (Chinese rules touch only Chinese numerals, English rules only English
    words, so mixed text is handled span by span). Any other supported Qwen3-ASR
    language returns the text unchanged; an unknown name raises a ValueError
    (languages.LanguageError).
    """
    if not isinstance(text, str):
        raise ValueError(f"inverse_normalize needs a str, got {type(text).__name__}")
    name = resolve_language(language)
    if name is None:
        return inverse_normalize_english(inverse_normalize_chinese(text))
    if name in ("Chinese", "Cantonese"):
        return inverse_normalize_chinese(text)
    if name == "English":
        return inverse_normalize_english(text)
    logger.debug("no ITN rules for %s; text unchanged", name)
    return text


# ==================================================================================================
# Chinese
# ==================================================================================================

_ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "幺": 1, "二": 2, "两": 2, "三": 3, "四": 4,
              "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}  # fmt: skip
_ZH_UNITS = {"十": 10, "百": 100, "千": 1000}
_ZH_SECTIONS = {"万": 10**4, "亿": 10**8}
_ZH_NUMERALS = set(_ZH_DIGITS) | set(_ZH_UNITS) | set(_ZH_SECTIONS)
_ZH_PLAIN_DIGITS = set("零〇一二三四五六七八九")  # may appear after 点 in a decimal

# Measure words and units after which a lone numeral (二..九, 两, 十) becomes a digit.
_ZH_MEASURES = sorted(
    set(
        """个 位 名 人 只 头 匹 条 本 张 件 次 遍 回 趟 天 周 年 月 日 号 岁 元 块 毛 分 秒 点 小时 钟头
    斤 公斤 克 千克 吨 米 厘米 毫米 公里 千米 里 度 层 楼 辆 台 部 架 艘 双 对 套 份 篇 首 句 章 节
    课 页 行 杯 瓶 碗 盘 倍 成 种 类 样 道 票 家 所 间 座 棵 朵 片 颗 粒 场 届 期 集 季 栋 户 轮 圈
    步 美元 欧元 英镑 日元 块钱 毛钱 分钟 星期 礼拜 周岁 升 毫升 码 寸 尺 亩 顿 声""".split()
    ),
    key=len,
    reverse=True,
)
_ZH_TIME_WORDS = ("上午", "下午", "中午", "晚上", "早上", "凌晨", "夜里", "半夜", "傍晚", "早晨", "今天", "明天", "昨天")
# Idioms and words whose numerals are not numbers (checked before any number rule).
_ZH_PROTECTED = sorted(
    """一五一十 三番五次 三番两次 七零八落 三十而立 四十不惑 五十而知天命 十万火急 五角大楼 三天两头
    三长两短 一点一点 一点一滴 三点一线 千万 万万 九九归一 一清二楚 一干二净 四分五裂 三五成群
    七七八八 十全十美 百分百""".split(),
    key=len,
    reverse=True,
)
_ZH_RANGE_LINKS = ("到", "至", "~", "～", "-", "—")
_ZH_MONEY_UNITS = ("块", "元", "毛")


def _zh_cardinal(run: str) -> Optional[int]:
    """Value of a numeral run with units (一百二十三, 两千零五, 三万五); None if malformed."""
    total = 0  # completed 亿 groups
    wan = 0  # completed 万 group inside the current 亿 group
    section = 0  # below 万
    number: Optional[int] = None  # digit waiting for its unit
    last_unit = 10**5  # units inside a section must descend
    after_zero = False
    for ch in run:
        if ch in _ZH_DIGITS:
            if ch == "幺":
                return None
            if number is not None and not after_zero:
                return None  # two digits in a row: 三三, 一五一十
            after_zero = _ZH_DIGITS[ch] == 0
            number = None if after_zero else _ZH_DIGITS[ch]
        elif ch in _ZH_UNITS:
            unit = _ZH_UNITS[ch]
            if unit >= last_unit:
                return None
            if number is None:
                if ch != "十" or section or wan or total:
                    if not (ch == "十" and after_zero):  # 一百零十 is malformed, 一千零十 is 1010
                        return None
                number = 1
            section += number * unit
            number, last_unit, after_zero = None, unit, False
        else:  # 万 / 亿
            section += number or 0
            if ch == "万":
                if wan or not section:
                    return None
                wan, section = section * 10**4, 0
            else:
                if not (section or wan):
                    return None
                total += (wan + section) * 10**8
                wan = section = 0
            number, last_unit, after_zero = None, 10**5, False
    if number is not None:
        prev = run[-2] if len(run) >= 2 else ""
        if not after_zero and prev in ("百", "千", "万", "亿"):
            # Colloquial abbreviation: 一百五 = 150, 三万五 = 35000.
            number *= {"百": 10, "千": 100, "万": 1000, "亿": 10**7}[prev]
        section += number
    return total + wan + section


@dataclass
class _Tok:
    """One piece of Chinese text; numbers carry their digit form and whether to use it."""

    text: str  # original characters
    digits: Optional[str] = None  # replacement when converted (None = not a number)
    convert: bool = False  # use ``digits``
    lone: bool = False  # a single-character numeral (convertible by context only)

    @property
    def out(self) -> str:
        return self.digits if (self.convert and self.digits is not None) else self.text


def _zh_run(text: str, i: int) -> int:
    """End of the maximal numeral run starting at i."""
    j = i
    while j < len(text) and text[j] in _ZH_NUMERALS:
        j += 1
    return j


def _zh_value(run: str) -> Tuple[Optional[str], bool]:
    """(digit form, is a digit string read one by one) of a numeral run; (None, _) if not a number."""
    if any(ch in _ZH_UNITS or ch in _ZH_SECTIONS for ch in run):
        value = _zh_cardinal(run)
        return (None if value is None else str(value)), False
    if len(run) > 1 and "两" in run:
        return None, True  # 一两个, 三三两两: approximations
    return "".join(str(_ZH_DIGITS[ch]) for ch in run), True


def _starts_measure(text: str, j: int) -> bool:
    return any(text.startswith(m, j) for m in _ZH_MEASURES)


def _lone_converts(ch: str, text: str, start: int, end: int) -> bool:
    """Whether a single-character numeral at text[start] converts, from its neighbours."""
    prev = text[start - 1] if start else ""
    nxt = text[end] if end < len(text) else ""
    if ch == "零" or prev == "第":
        return False
    if ch == "十" and nxt == "分":
        return text.startswith("钟", end + 1)  # 十分钟; 十分 alone means "very"
    if ch == "一":
        if nxt == "月":
            return True
        if nxt in ("日", "号"):
            return prev == "月"
        if nxt == "点":
            after = text[end + 1] if end + 1 < len(text) else ""
            return after in ("半", "钟", "整") or any(text.endswith(w, 0, start) for w in _ZH_TIME_WORDS)
        return False
    return _starts_measure(text, end)


def _zh_tokens(text: str) -> List[_Tok]:
    toks: List[_Tok] = []
    plain: List[str] = []

    def flush_plain() -> None:
        if plain:
            toks.append(_Tok("".join(plain)))
            plain.clear()

    i, n = 0, len(text)
    while i < n:
        protected = next((w for w in _ZH_PROTECTED if text.startswith(w, i)), None)
        if protected:
            plain.append(protected)
            i += len(protected)
            continue
        for prefix, sign in (("百分之", "%"), ("千分之", "‰")):
            if text.startswith(prefix, i):
                after = i + len(prefix) + 1
                if text.startswith(prefix + "百", i) and _zh_run(text, after) == after:
                    flush_plain()
                    toks.append(_Tok(prefix + "百", "100" + sign, True))
                    i += len(prefix) + 1
                    break
                number = _zh_number(text, i + len(prefix))
                if number is not None:
                    flush_plain()
                    end, digits = number
                    toks.append(_Tok(text[i:end], digits + sign, True))
                    i = end
                    break
        else:
            ch = text[i]
            if ch == "负" and i + 1 < n and (text[i + 1] in _ZH_DIGITS or text[i + 1] == "十"):
                number = _zh_number(text, i + 1)
                if number is not None:
                    flush_plain()
                    toks.append(_Tok(text[i : number[0]], "-" + number[1], True))
                    i = number[0]
                    continue
            if ch in _ZH_DIGITS or ch == "十":
                flush_plain()
                i = _zh_numeral_tokens(text, i, toks)
                continue
            plain.append(ch)
            i += 1
    flush_plain()
    return toks


def _zh_number(text: str, i: int) -> Optional[Tuple[int, str]]:
    """A plain or decimal number at i (for 百分之/负): (end, digits) or None."""
    if i >= len(text) or not (text[i] in _ZH_DIGITS or text[i] == "十"):
        return None
    j = _zh_run(text, i)
    digits, is_string = _zh_value(text[i:j])
    if digits is None or (is_string and len(digits) > 1 and digits[0] == "0"):
        return None
    if j < len(text) and text[j] == "点":
        k = _zh_run(text, j + 1)
        frac = text[j + 1 : k]
        if frac and all(c in _ZH_PLAIN_DIGITS for c in frac):
            return k, digits + "." + "".join(str(_ZH_DIGITS[c]) for c in frac)
    return j, digits


def _zh_numeral_tokens(text: str, i: int, toks: List[_Tok]) -> int:
    """Tokenise the number starting at text[i] (a digit or 十); return the index after it."""
    n = len(text)
    j = _zh_run(text, i)
    run = text[i:j]
    digits, is_string = _zh_value(run)
    lone = len(run) == 1
    if digits is None or (i > 0 and text[i - 1] in "几数") or text.startswith("几", j):
        toks.append(_Tok(run))  # malformed, or vague (几十, 数百, 二十几)
        return j
    clock_hour = not is_string or lone
    if j < n and text[j] == "点" and clock_hour:
        k = _zh_run(text, j + 1)
        after = text[j + 1 : k]
        if after:
            after_digits, after_is_string = _zh_value(after)
            if after_digits is not None and after_is_string and "幺" not in after and "两" not in after:
                if text.startswith("分", k):  # 三点零五分: clock time, minutes as read
                    toks += [_Tok(run, digits, True), _Tok("点"), _Tok(after, after_digits, True)]
                else:  # 三点一四: decimal
                    toks.append(_Tok(text[i:k], digits + "." + after_digits, True))
                return k
            if after_digits is not None and not after_is_string and 0 <= int(digits) <= 24 and int(after_digits) < 60:
                toks += [_Tok(run, digits, True), _Tok("点"), _Tok(after, after_digits, True)]  # 三点十五
                return k
        elif text.startswith(("半", "钟", "整"), j + 1) and int(digits) <= 24:
            toks.append(_Tok(run, digits, True))  # 八点半, 一点钟
            return j
    if lone:
        toks.append(_Tok(run, digits, _lone_converts(run, text, i, j), lone=True))
    elif is_string:
        keep_pair = len(run) == 2 and not any(c in "零〇幺" for c in run) and not text.startswith("年", j)
        toks.append(_Tok(run, digits, not keep_pair))
    else:
        toks.append(_Tok(run, digits, True))
    return j


def _zh_link(toks: Sequence[_Tok]) -> None:
    """Context between numbers: ranges (三到五个) and money tails (三块五)."""
    for a in range(len(toks) - 2):
        left, mid, right = toks[a], toks[a + 1], toks[a + 2]
        if left.digits is None or right.digits is None or mid.digits is not None:
            continue
        if mid.text in _ZH_RANGE_LINKS and (left.convert or right.convert):
            for tok in (left, right):
                if tok.text not in ("零", "〇"):
                    tok.convert = True
        elif mid.text in _ZH_MONEY_UNITS and left.convert and right.lone and right.text != "零":
            right.convert = True


def inverse_normalize_chinese(text: str) -> str:
    """Chinese numerals in ``text`` to digits (rules in the module docstring)."""
    if not any(ch in _ZH_NUMERALS for ch in text):
        return text
    toks = _zh_tokens(text)
    _zh_link(toks)
    return "".join(t.out for t in toks)


# ==================================================================================================
# English
# ==================================================================================================

_EN_ONES = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9}  # fmt: skip
_EN_TEENS = {"ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
             "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19}  # fmt: skip
_EN_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
            "eighty": 80, "ninety": 90}  # fmt: skip
_EN_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
# Ordinal word -> the cardinal word it stands for. "second" is left out on purpose (time unit).
_EN_ORDINALS = {"first": "one", "third": "three", "fourth": "four", "fifth": "five", "sixth": "six",
                "seventh": "seven", "eighth": "eight", "ninth": "nine", "tenth": "ten",
                "eleventh": "eleven", "twelfth": "twelve", "hundredth": "hundred",
                "thousandth": "thousand", "millionth": "million", "billionth": "billion",
                **{w + "th": w for w in list(_EN_TEENS)[3:]},  # thirteenth .. nineteenth
                **{w[:-1] + "ieth": w for w in _EN_TENS}}  # twentieth .. ninetieth  # fmt: skip
_EN_CARDINAL_WORDS = set(_EN_ONES) | set(_EN_TEENS) | set(_EN_TENS) | set(_EN_SCALES) | {"hundred"}
_EN_NUMBER_WORDS = _EN_CARDINAL_WORDS | set(_EN_ORDINALS) | {"oh"}
_EN_DIGIT_WORDS = set(_EN_ONES) | {"oh"}
_EN_BELOW_HUNDRED_STARTS = (set(_EN_ONES) - {"zero"}) | set(_EN_TEENS) | set(_EN_TENS)

_EN_WORD = re.compile(r"[A-Za-z]+(?:['’][A-Za-z]+)*(?:-[A-Za-z]+(?:['’][A-Za-z]+)*)*")
_EN_GAP = re.compile(r"[ \t]+\Z")
_EN_PERCENT = re.compile(r"[ \t]+(?:percent|per[ \t]+cent)\b", re.IGNORECASE)
_EN_CLOCK_AFTER = re.compile(r"[ \t]*(?:[ap]\.?m\.?(?![A-Za-z])|o['’]clock\b)", re.IGNORECASE)
_EN_CLOCK_BEFORE = re.compile(r"\b(?:at|by|until|till|around|from|before|after|since|to)[ \t]+\Z", re.IGNORECASE)


def _en_parts(word: str) -> Optional[List[str]]:
    """Number words of one token ("Twenty-three" -> ["twenty", "three"]); None if not all numbers."""
    parts = word.lower().replace("’", "'").split("-")
    return parts if all(p in _EN_NUMBER_WORDS for p in parts) else None


@dataclass
class _Chunk:
    value: int
    n_words: int
    digits: str  # how it reads as a digit group ("oh" -> "0")
    small: bool  # below 100 and without scale words
    single_digit: bool  # one of zero/oh..nine


def _en_below_thousand(words: Sequence[str], i: int) -> Tuple[Optional[int], int]:
    """Parse [one..ninety-nine] [hundred [and] [one..ninety-nine]] at i; (value, next index)."""
    n = len(words)

    def below_hundred(k: int) -> Tuple[Optional[int], int]:
        if k < n and words[k] in _EN_TENS:
            v = _EN_TENS[words[k]]
            if k + 1 < n and words[k + 1] in _EN_ONES and words[k + 1] != "zero":
                return v + _EN_ONES[words[k + 1]], k + 2
            return v, k + 1
        if k < n and words[k] in _EN_TEENS:
            return _EN_TEENS[words[k]], k + 1
        if k < n and words[k] in _EN_ONES and words[k] != "zero":
            return _EN_ONES[words[k]], k + 1
        return None, k

    if words[i] == "a" and i + 1 < n and (words[i + 1] == "hundred" or words[i + 1] in _EN_SCALES):
        value, k = 1, i + 1
    else:
        value, k = below_hundred(i)
        if value is None:
            return None, i
    if k < n and words[k] == "hundred":
        value *= 100
        k += 1
        if k + 1 < n and words[k] == "and":
            rest, k2 = below_hundred(k + 1)
            if rest is not None:
                return value + rest, k2
        rest, k2 = below_hundred(k)
        if rest is not None:
            return value + rest, k2
    return value, k


def _en_chunk(words: Sequence[str], i: int) -> Optional[_Chunk]:
    """Longest well-formed cardinal (or a lone zero/oh) starting at words[i]."""
    w = words[i]
    if w in ("zero", "oh"):
        return _Chunk(0, 1, "0", True, True)
    total, k, last_scale, used_scale = 0, i, None, False
    while k < len(words):
        group, k2 = _en_below_thousand(words, k)
        if group is None:
            break
        if k2 < len(words) and words[k2] in _EN_SCALES and (last_scale is None or _EN_SCALES[words[k2]] < last_scale):
            last_scale = _EN_SCALES[words[k2]]
            total += group * last_scale
            k, used_scale = k2 + 1, True
            if k + 1 < len(words) and words[k] == "and":
                k += 1
            continue
        total += group
        k = k2
        break
    if k == i or (k > i and words[k - 1] == "and"):
        if k == i:
            return None
        k -= 1
    n_words = k - i
    small = total < 100 and not used_scale and "hundred" not in words[i:k]
    return _Chunk(total, n_words, str(total), small, n_words == 1 and w in _EN_ONES)


def _en_chunks(words: Sequence[str]) -> Optional[List[_Chunk]]:
    chunks, i = [], 0
    while i < len(words):
        chunk = _en_chunk(words, i)
        if chunk is None:
            return None
        chunks.append(chunk)
        i += chunk.n_words
    return chunks


def _ordinal_suffix(value: int) -> str:
    if value % 100 in (11, 12, 13):
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(value % 10, "th")


def _en_convert(words: List[str], percent: bool, clock_context: bool, clock_after: bool) -> Optional[str]:
    """Digits for a span of number words (lower case); None to leave it as it is."""
    if "point" in words:
        p = words.index("point")
        left, frac = words[:p], words[p + 1 :]
        left_digits = "0" if not left else _en_integer(left)
        if left_digits is None:
            return None
        out = left_digits + "." + "".join("0" if w in ("oh", "zero") else str(_EN_ONES[w]) for w in frac)
        return out + ("%" if percent else "")
    if words[-1] in _EN_ORDINALS:
        cardinal = words[:-1] + [_EN_ORDINALS[words[-1]]]
        chunks = _en_chunks(cardinal)
        if not chunks or len(chunks) != 1 or (len(words) == 1 and chunks[0].value < 10):
            return None
        if cardinal[0] == "a" and len(words) == 2:
            return None
        value = chunks[0].value
        return f"{value}{_ordinal_suffix(value)}"
    chunks = _en_chunks(words)
    if not chunks:
        return None
    if len(chunks) == 1:
        chunk = chunks[0]
        if chunk.single_digit or (words[0] == "a" and len(words) == 2):
            if not (percent or clock_after) or words[0] == "oh":
                return None
        return chunk.digits + ("%" if percent else "")
    if percent or not all(c.small for c in chunks):
        return None
    # Several small numbers: a clock time, a year or a digit string.
    values = [c.value for c in chunks]
    single = [c.single_digit for c in chunks]
    two_digit = [c.value >= 10 for c in chunks]
    if clock_context or clock_after:
        if len(chunks) == 2 and 1 <= values[0] <= 12 and two_digit[1] and values[1] < 60:
            return f"{values[0]}:{values[1]:02d}"
        if len(chunks) == 3 and 1 <= values[0] <= 12 and words[1] in ("oh", "zero") and single[2]:
            return f"{values[0]}:0{values[2]}"
    if two_digit[0] and len(chunks) == 2 and two_digit[1]:
        return f"{values[0]}{values[1]:02d}"  # nineteen ninety eight
    if two_digit[0] and len(chunks) == 3 and words[chunks[0].n_words] in ("oh", "zero") and single[2] and values[2]:
        return f"{values[0]}0{values[2]}"  # nineteen oh five
    if len(chunks) >= 3:
        return "".join(c.digits for c in chunks)  # one two three four
    return None


def _en_integer(words: List[str]) -> Optional[str]:
    """Digits of the integer part before "point"."""
    chunks = _en_chunks(words)
    if not chunks:
        return None
    if len(chunks) == 1:
        return chunks[0].digits
    if all(c.small for c in chunks):
        return "".join(c.digits for c in chunks)
    return None


def inverse_normalize_english(text: str) -> str:
    """English number words in ``text`` to digits (rules in the module docstring)."""
    tokens = [(m.start(), m.end(), m.group()) for m in _EN_WORD.finditer(text)]
    if not any(_en_parts(t[2]) for t in tokens):
        return text
    out: List[str] = []
    pos = 0
    i = 0
    while i < len(tokens):
        span = _en_span(text, tokens, i)
        if span is None:
            i += 1
            continue
        j, words = span  # tokens[i:j] form the number
        start, end = tokens[i][0], tokens[j - 1][1]
        percent = _EN_PERCENT.match(text, end)
        clock_after = _EN_CLOCK_AFTER.match(text, end) is not None
        # the clock word ends right before the number: a short look-back, not a scan from 0
        clock_context = _EN_CLOCK_BEFORE.search(text, max(0, start - 32), start) is not None
        digits = _en_convert(words, percent is not None, clock_context, clock_after)
        if digits is None:
            i = j
            continue
        if percent is not None:
            end = percent.end()
            while j < len(tokens) and tokens[j][0] < end:
                j += 1
        out.append(text[pos:start])
        out.append(digits)
        pos = end
        i = j
    out.append(text[pos:])
    return "".join(out)


def _en_span(text: str, tokens: Sequence[Tuple[int, int, str]], i: int) -> Optional[Tuple[int, List[str]]]:
    """The number starting at token i: (index after its last token, its words) or None."""
    first = tokens[i][2].lower()
    parts = _en_parts(first)
    if first == "a":
        if i + 1 < len(tokens) and _EN_GAP.match(text, tokens[i][1], tokens[i + 1][0]):
            nxt = tokens[i + 1][2].lower()
            if nxt in ("hundred", "thousand", "million", "billion", "trillion"):
                parts = ["a"]
    if parts is None or parts[0] in ("oh", "hundred") or parts[0] in _EN_SCALES:
        return None
    words = list(parts)
    j = i + 1
    in_fraction = False
    while words[-1] not in _EN_ORDINALS and j < len(tokens):
        if not _EN_GAP.match(text, tokens[j - 1][1], tokens[j][0]):
            break
        word = tokens[j][2].lower()
        nxt = tokens[j + 1][2].lower() if j + 1 < len(tokens) else ""
        nxt_joined = j + 1 < len(tokens) and _EN_GAP.match(text, tokens[j][1], tokens[j + 1][0]) is not None
        if word == "point" and not in_fraction:
            if nxt_joined and nxt in _EN_DIGIT_WORDS:
                words.append("point")
                in_fraction = True
                j += 1
                continue
            break
        if in_fraction:
            if word in _EN_DIGIT_WORDS:
                words.append(word)
                j += 1
                continue
            break
        if word == "and":
            nparts = _en_parts(nxt) if nxt_joined else None
            after_scale = words[-1] == "hundred" or words[-1] in _EN_SCALES
            if after_scale and nparts and nparts[0] in _EN_BELOW_HUNDRED_STARTS:
                words.append("and")
                j += 1
                continue
            break
        parts = _en_parts(word)
        if parts is None:
            break
        if parts[0] == "oh" and not (nxt_joined and nxt in _EN_ONES and len(parts) == 1):
            break
        words.extend(parts)
        j += 1
    return j, words
