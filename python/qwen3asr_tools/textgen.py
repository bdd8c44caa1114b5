"""Seeded text content for the synthetic labelled-speech dataset (English and Mandarin).

Every item is generated as an (English, Mandarin) pair with the same meaning: digit
strings read digit by digit, cardinal numbers, clock times and short smart-home
commands built from device x action x place, timers, alarms, reminders and quantities.

Labels are in the normalised written form the model is trained to output, and the same
string is what espeak-ng is asked to speak, so label and audio always agree:

- English: lowercase ASCII letters and single spaces only. Numbers are spelled as words
  ("twenty one", "three hundred five", no "and", no hyphens), digit strings as one word
  per digit ("four oh" is never used: 0 is "zero").
- Mandarin: Chinese characters only, no spaces, no punctuation. Numbers are written in
  characters as spoken (二十一, 一百零五, 两千; 两 before a measure word or clock hour).

Splits are disjoint by text: a text belongs to exactly one of train/dev/test through a
hash of its label (``split_of``), independent of the seed, so no seed's test text is
ever in any seed's training set.

CLI: ``python scripts/textgen.py --charset`` prints the label character sets;
``python scripts/textgen.py --sample test --language Chinese -n 10`` prints samples.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
from dataclasses import dataclass

LANGUAGES = ("English", "Chinese")
SPLITS = ("train", "dev", "test")
# Hash buckets (of 100) per split: 80% train, 10% dev, 10% test.
SPLIT_BUCKETS = {"train": range(0, 80), "dev": range(80, 90), "test": range(90, 100)}
# Kinds of text and how often each is drawn.
KIND_WEIGHTS = {"command": 0.55, "digits": 0.17, "number": 0.14, "time": 0.14}
MAX_DIGITS = 12  # digit strings are 1..12 digits long

ENGLISH_CHARSET = frozenset("abcdefghijklmnopqrstuvwxyz ")

# ---------------------------------------------------------------- numbers

_EN_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
            "fourteen fifteen sixteen seventeen eighteen nineteen").split()
_EN_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_ZH_DIGITS = "零一二三四五六七八九"
# Characters that spell numbers; the tiny model's tokenizer keeps each a token of its own
# (digit strings read one by one are then one token per spoken digit).
ZH_NUMERALS = _ZH_DIGITS + "十百千万两"


def en_number(n: int) -> str:
    """Spell 0 <= n < 10**9 in English words: 305 -> "three hundred five"."""
    if not 0 <= n < 10**9:
        raise ValueError(f"en_number supports 0 <= n < 1e9, got {n}")
    if n < 20:
        return _EN_ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _EN_TENS[tens] + (" " + _EN_ONES[ones] if ones else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return _EN_ONES[hundreds] + " hundred" + (" " + en_number(rest) if rest else "")
    for size, name in ((10**6, "million"), (1000, "thousand")):
        if n >= size:
            high, rest = divmod(n, size)
            return en_number(high) + " " + name + (" " + en_number(rest) if rest else "")
    raise AssertionError("unreachable")


def _zh_below_10000(n: int, leading: bool) -> str:
    """Characters for 0 < n < 10000; ``leading`` allows 十五 instead of 一十五."""
    out = []
    zero_pending = False
    for value, unit in ((1000, "千"), (100, "百"), (10, "十"), (1, "")):
        digit = (n // value) % 10
        if digit == 0:
            if out:
                zero_pending = True
            continue
        if zero_pending:
            out.append("零")
            zero_pending = False
        if unit == "十" and digit == 1 and leading and not out:
            out.append("十")
        elif unit == "千" and digit == 2:
            out.append("两千")
        else:
            out.append(_ZH_DIGITS[digit] + unit)
    return "".join(out)


def zh_number(n: int) -> str:
    """Write 0 <= n < 10**8 in Chinese characters as read: 10005 -> 一万零五, 2000 -> 两千."""
    if not 0 <= n < 10**8:
        raise ValueError(f"zh_number supports 0 <= n < 1e8, got {n}")
    if n == 0:
        return "零"
    high, low = divmod(n, 10000)
    if not high:
        return _zh_below_10000(low, leading=True)
    head = "两" if high == 2 else _zh_below_10000(high, leading=True)
    if not low:
        return head + "万"
    tail = _zh_below_10000(low, leading=False)
    return head + "万" + ("零" if low < 1000 else "") + tail


def zh_count(n: int) -> str:
    """A count before a measure word or hour: 2 -> 两, otherwise zh_number (1..99)."""
    return "两" if n == 2 else zh_number(n)


def en_plural(n: int, singular: str, plural: str) -> str:
    return f"{en_number(n)} {singular if n == 1 else plural}"


# ---------------------------------------------------------------- vocabulary
# Each table lists (English, Mandarin) pairs with the same meaning.

PLACES = (("kitchen", "厨房"), ("bedroom", "卧室"), ("living room", "客厅"),
          ("bathroom", "卫生间"), ("study", "书房"), ("dining room", "餐厅"),
          ("garage", "车库"), ("hallway", "走廊"), ("balcony", "阳台"),
          ("office", "办公室"), ("garden", "花园"), ("kids room", "儿童房"))
SWITCHABLE = (("light", "灯"), ("lamp", "台灯"), ("fan", "风扇"), ("heater", "暖气"),
              ("television", "电视"), ("radio", "收音机"), ("speaker", "音箱"),
              ("air purifier", "空气净化器"), ("humidifier", "加湿器"),
              ("ceiling light", "吸顶灯"))
ON_ACTIONS = (("turn on", "打开"), ("switch on", "开一下"))
OFF_ACTIONS = (("turn off", "关掉"), ("switch off", "关闭"))
APPLIANCES = (("washing machine", "洗衣机"), ("dishwasher", "洗碗机"),
              ("vacuum cleaner", "吸尘器"), ("coffee machine", "咖啡机"),
              ("rice cooker", "电饭煲"), ("oven", "烤箱"), ("dryer", "烘干机"))
DOORS = (("front door", "前门"), ("back door", "后门"), ("garage door", "车库门"),
         ("gate", "大门"), ("window", "窗户"))
# (English singular, English plural, Mandarin measure word, Mandarin noun)
ITEMS = (("apple", "apples", "个", "苹果"), ("egg", "eggs", "个", "鸡蛋"),
         ("banana", "bananas", "根", "香蕉"), ("bottle of milk", "bottles of milk", "瓶", "牛奶"),
         ("loaf of bread", "loaves of bread", "袋", "面包"), ("bag of rice", "bags of rice", "袋", "大米"),
         ("can of beer", "cans of beer", "罐", "啤酒"), ("box of tea", "boxes of tea", "盒", "茶叶"),
         ("tomato", "tomatoes", "个", "西红柿"), ("bottle of water", "bottles of water", "瓶", "水"),
         ("onion", "onions", "个", "洋葱"), ("pack of noodles", "packs of noodles", "包", "面条"))
TASKS = (("call mom", "给妈妈打电话"), ("take my medicine", "吃药"),
         ("water the plants", "给花浇水"), ("buy milk", "买牛奶"), ("feed the cat", "喂猫"),
         ("walk the dog", "遛狗"), ("pay the bills", "交电费"), ("check the oven", "看一下烤箱"),
         ("pick up the kids", "去接孩子"), ("go to the gym", "去健身房"))
CONTACTS = (("mom", "妈妈"), ("dad", "爸爸"), ("grandma", "奶奶"), ("grandpa", "爷爷"),
            ("my brother", "我哥哥"), ("my sister", "我姐姐"), ("the doctor", "医生"),
            ("my boss", "我老板"), ("the office", "办公室"))
DAYS = (("today", "今天"), ("tomorrow", "明天"), ("this weekend", "这个周末"),
        ("tonight", "今晚"), ("on monday", "星期一"), ("on friday", "星期五"))
TIMER_UNITS = (("second", "seconds", "秒"), ("minute", "minutes", "分钟"),
               ("hour", "hours", "个小时"))
# Whole phrases with no slot.
FIXED = (("what time is it", "现在几点"), ("cancel the timer", "取消定时器"),
         ("pause the music", "暂停播放"), ("play the next song", "播放下一首歌"),
         ("turn the volume up", "把声音开大一点"), ("turn the volume down", "把声音关小一点"),
         ("stop the alarm", "关掉闹钟"), ("turn off all the lights", "关掉所有的灯"),
         ("good night", "晚安"), ("good morning", "早上好"), ("read me the news", "给我读新闻"),
         ("how much time is left", "还剩多少时间"))
PERIODS = (("in the morning", "早上", range(5, 12)), ("in the afternoon", "下午", range(1, 7)),
           ("in the evening", "晚上", range(6, 12)))

# ---------------------------------------------------------------- generators


def _digits(rng: random.Random) -> tuple[str, str]:
    n = rng.randint(1, MAX_DIGITS)
    digits = [rng.randrange(10) for _ in range(n)]
    return " ".join(_EN_ONES[d] for d in digits), "".join(_ZH_DIGITS[d] for d in digits)


def _number(rng: random.Random) -> tuple[str, str]:
    r = rng.random()
    if r < 0.35:
        n = rng.randrange(0, 100)
    elif r < 0.75:
        n = rng.randrange(100, 10000)
    else:
        n = rng.randrange(10000, 10**7)
    return en_number(n), zh_number(n)


def _clock(rng: random.Random) -> tuple[str, str]:
    """A clock time alone, e.g. "half past seven in the evening" / "晚上七点半"."""
    en_period, zh_period, hours = rng.choice(PERIODS) if rng.random() < 0.5 else ("", "", range(1, 13))
    h = rng.choice(hours)
    form = rng.randrange(5)
    en_h, zh_h = en_number(h), zh_count(h) + "点"
    if form == 0:
        en, zh = f"half past {en_h}", zh_h + "半"
    elif form == 1:
        en, zh = f"quarter past {en_h}", zh_h + "一刻"
    elif form == 2:
        m = rng.choice((5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, rng.randrange(1, 60)))
        en_m = f"oh {en_number(m)}" if m < 10 else en_number(m)
        zh_m = ("零" + zh_number(m) if m < 10 else zh_number(m)) + "分"
        en, zh = f"{en_h} {en_m}", zh_h + zh_m
    elif form == 3:
        en, zh = f"{en_h} sharp", zh_h + "整"
    elif en_period:
        en, zh = en_h, zh_h
    else:
        en, zh = f"{en_h} sharp", zh_h + "整"
    if en_period:
        en, zh = f"{en} {en_period}", zh_period + zh
    return en, zh


def _time(rng: random.Random) -> tuple[str, str]:
    if rng.random() < 0.06:
        return rng.choice((("noon", "中午十二点"), ("midnight", "半夜十二点")))
    return _clock(rng)


def _please(rng: random.Random, en: str, zh: str) -> tuple[str, str]:
    return (f"please {en}", "请" + zh) if rng.random() < 0.2 else (en, zh)


def _command(rng: random.Random) -> tuple[str, str]:
    form = rng.randrange(14)
    place_en, place_zh = rng.choice(PLACES)
    if form in (0, 1, 2):  # switch a device in a place
        dev_en, dev_zh = rng.choice(SWITCHABLE)
        act_en, act_zh = rng.choice(ON_ACTIONS if rng.random() < 0.5 else OFF_ACTIONS)
        return _please(rng, f"{act_en} the {place_en} {dev_en}", f"{act_zh}{place_zh}的{dev_zh}")
    if form == 3:
        pct = rng.choice(range(10, 101, 10))
        return _please(rng, f"set the {place_en} light to {en_number(pct)} percent",
                       f"把{place_zh}的灯设成百分之{zh_number(pct)}")
    if form == 4:
        deg = rng.randrange(16, 31)
        return _please(rng, f"set the {place_en} temperature to {en_number(deg)} degrees",
                       f"把{place_zh}的温度设成{zh_number(deg)}度")
    if form == 5:
        sing, plur, unit_zh = rng.choice(TIMER_UNITS)
        n = rng.randrange(1, 13) if unit_zh == "个小时" else rng.choice((1, 2, 3, 5, 10, 15, 20, 25, 30, 40, 45, 50, 60, rng.randrange(1, 60)))
        return _please(rng, f"set a timer for {en_plural(n, sing, plur)}",
                       f"设置一个{zh_count(n)}{unit_zh}的定时器")
    if form == 6:
        t_en, t_zh = _clock(rng)
        if rng.random() < 0.5:
            return f"set an alarm for {t_en}", f"设一个{t_zh}的闹钟"
        return f"wake me up at {t_en}", f"{t_zh}叫醒我"
    if form == 7:
        task_en, task_zh = rng.choice(TASKS)
        t_en, t_zh = _clock(rng)
        return f"remind me to {task_en} at {t_en}", f"{t_zh}提醒我{task_zh}"
    if form == 8:
        sing, plur, measure, noun = rng.choice(ITEMS)
        n = rng.randrange(1, 13)
        return (f"add {en_plural(n, sing, plur)} to the shopping list",
                f"把{zh_count(n)}{measure}{noun}加到购物清单")
    if form == 9:
        app_en, app_zh = rng.choice(APPLIANCES)
        if rng.random() < 0.5:
            return _please(rng, f"start the {app_en}", f"启动{app_zh}")
        return _please(rng, f"stop the {app_en}", f"停止{app_zh}")
    if form == 10:
        door_en, door_zh = rng.choice(DOORS)
        verb = rng.randrange(3)
        if verb == 0:
            return _please(rng, f"lock the {door_en}", f"锁上{door_zh}")
        if verb == 1:
            return _please(rng, f"open the {door_en}", f"打开{door_zh}")
        return _please(rng, f"close the {place_en} curtains", f"关上{place_zh}的窗帘")
    if form == 11:
        q = rng.randrange(3)
        if q == 0:
            day_en, day_zh = rng.choice(DAYS)
            return f"what is the weather like {day_en}", f"{day_zh}天气怎么样"
        if q == 1:
            return f"what is the temperature in the {place_en}", f"{place_zh}的温度是多少"
        return _please(rng, f"play a song in the {place_en}", f"在{place_zh}放一首歌")
    if form == 12:
        who_en, who_zh = rng.choice(CONTACTS)
        return _please(rng, f"call {who_en}", f"给{who_zh}打电话")
    if rng.random() < 0.5:
        level = rng.randrange(0, 101, 5)
        return _please(rng, f"set the volume to {en_number(level)}", f"把音量设成{zh_number(level)}")
    return rng.choice(FIXED)


_GENERATORS = {"command": _command, "digits": _digits, "number": _number, "time": _time}


def sample_pair(rng: random.Random, kind: str) -> tuple[str, str]:
    """One (English label, Mandarin label) pair of the given kind (see KIND_WEIGHTS)."""
    try:
        return _GENERATORS[kind](rng)
    except KeyError:
        raise ValueError(f"unknown text kind {kind!r}; expected one of {sorted(_GENERATORS)}") from None


# ---------------------------------------------------------------- splits


@dataclass(frozen=True)
class Utterance:
    text: str      # label in normalised written form (see module docstring)
    language: str  # "English" or "Chinese"
    kind: str      # "command", "digits", "number" or "time"


def split_of(text: str) -> str:
    """The split ("train", "dev" or "test") a label belongs to, from a hash of its UTF-8 bytes."""
    bucket = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") % 100
    for split, buckets in SPLIT_BUCKETS.items():
        if bucket in buckets:
            return split
    raise AssertionError("unreachable")


def sample_texts(split: str, language: str, n: int, seed: int, unique: bool = True,
                 max_tries_per_text: int = 2000) -> list[Utterance]:
    """``n`` utterances whose labels all belong to ``split`` (see split_of).

    With ``unique`` no label occurs twice; without it labels repeat as often as the
    generator draws them. Deterministic for a given (split, language, seed, unique); a
    larger ``n`` extends the list of a smaller one.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    if language not in LANGUAGES:
        raise ValueError(f"unknown language {language!r}; expected one of {LANGUAGES}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(f"textgen/{seed}/{split}/{language}")
    kinds, weights = list(KIND_WEIGHTS), list(KIND_WEIGHTS.values())
    seen: set[str] = set()
    out: list[Utterance] = []
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > max_tries_per_text * (n + 1):
            raise RuntimeError(f"could not find {n} distinct {language} {split} texts "
                               f"(found {len(out)}); ask for fewer or add vocabulary")
        kind = rng.choices(kinds, weights)[0]
        en, zh = sample_pair(rng, kind)
        text = en if language == "English" else zh
        if (unique and text in seen) or split_of(text) != split:
            continue
        seen.add(text)
        out.append(Utterance(text, language, kind))
    return out


# ---------------------------------------------------------------- charset


def _chinese_strings():
    yield _ZH_DIGITS + "十百千万两半一刻整点分" + "中午半夜十二点"
    for table in (PLACES, SWITCHABLE, ON_ACTIONS, OFF_ACTIONS, APPLIANCES, DOORS, TASKS,
                  CONTACTS, DAYS, FIXED):
        for _, zh in table:
            yield zh
    for _, _, measure, noun in ITEMS:
        yield measure + noun
    for _, _, zh in TIMER_UNITS:
        yield zh
    for _, zh, _ in PERIODS:
        yield zh
    # Template characters of _command.
    yield ("请的把设成百分之度设置一个定时器闹钟叫醒我提醒加到购物清单启动停止锁上打开关上窗帘"
           "天气怎么样的温度是多少在放一首歌给打电话音量")


CHINESE_CHARSET = frozenset("".join(_chinese_strings()))
CHARSETS = {"English": ENGLISH_CHARSET, "Chinese": CHINESE_CHARSET}


def check_label(text: str, language: str) -> None:
    """Raise ValueError if ``text`` is not a well-formed label of ``language``."""
    charset = CHARSETS.get(language)
    if charset is None:
        raise ValueError(f"unknown language {language!r}; expected one of {LANGUAGES}")
    bad = sorted(set(text) - charset)
    if bad:
        raise ValueError(f"{language} label {text!r} has characters outside the label set: {bad}")
    if not text or text != text.strip() or "  " in text:
        raise ValueError(f"{language} label {text!r} is empty or has stray spaces")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--charset", action="store_true", help="print the label character sets")
    ap.add_argument("--sample", choices=SPLITS, help="print sample texts of this split")
    ap.add_argument("--language", choices=LANGUAGES, default="English")
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.charset:
        print(f"English ({len(ENGLISH_CHARSET)}): {''.join(sorted(ENGLISH_CHARSET))!r}")
        print(f"Chinese ({len(CHINESE_CHARSET)}): {''.join(sorted(CHINESE_CHARSET))}")
    if args.sample:
        for u in sample_texts(args.sample, args.language, args.n, args.seed):
            print(f"{u.kind}\t{u.text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
