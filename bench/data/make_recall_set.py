"""Writes ``bench/data/recall_conversations.json``: agentkeep's own recall evaluation set.

Six long conversations between two friends, each over eight or nine dated sessions, in the
shape of LoCoMo's (sessions of turns, each turn with an id, a speaker and its text), and
questions about them, each labelled with the ids of the turns that answer it:

* ``single-hop``: one turn answers it, asked in other words than the turn's ("What hobby did
  Noor start learning?" for "I signed up for pottery lessons"), or reusing a word of it as
  people often do ("What kind of animal is Biscuit?");
* ``multi-hop``: two turns of different sessions together answer it (a later turn names a pet,
  a place or a person only by name; the question names it by what the earlier turn said it is);
* ``temporal``: "when" questions, answered by the date of the session a turn was said in;
* ``dated``: questions that name the day or the month something was told ("What news did Noor
  share on March 16, 2023?", "... in April 2023?") and nothing else of it, answered by the turns
  in which that speaker told of an event that day or month. They are made after the rest, from
  a random generator of their own, so the other questions stay as they were.

Life events are drawn from a list of kinds, each with several phrasings for the telling, the
follow-up and the questions, and fillers (names, places, things) that differ per conversation;
between them run small talk and reactions, some of which share the questions' everyday words.
Everything is drawn from one seeded ``random.Random``: the file is the same on every run.

Run: ``.venv/bin/python bench/data/make_recall_set.py`` (rewrites the JSON next to it).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

SEED = 29
OUT = Path(__file__).with_name("recall_conversations.json")

PAIRS = [
    ("Noor", "Elliot"),
    ("Priya", "Jonas"),
    ("Marta", "Kofi"),
    ("Sven", "Ayumi"),
    ("Lucia", "Deshawn"),
    ("Ilse", "Tomasz"),
]


@dataclass
class Kind:
    """A kind of life event: how it is told, followed up and asked about. ``{x}`` fields are
    filled per conversation from ``fills``; ``{p}`` is the teller, ``{o}`` the other speaker."""

    name: str
    echo: tuple[str, str]
    """A question that reuses a word of the telling (a name, a place), as people often ask,
    and which turns answer it: ``"tell"``, ``"follow"`` or ``"both"``."""
    fills: list[dict[str, str]]
    tell: list[str]
    follow: list[str]
    single: list[str]
    multi: list[str]
    when: list[str]
    reactions: list[str] = field(default_factory=list[str])


KINDS = [
    Kind(
        "pet",
        ("What kind of animal is {pet}?", "tell"),
        [
            {"animal": "dog", "breed": "a scruffy terrier", "pet": "Biscuit", "broke": "my reading lamp"},
            {"animal": "cat", "breed": "a ginger tabby", "pet": "Saffron", "broke": "a ceramic vase"},
            {"animal": "dog", "breed": "a retired greyhound", "pet": "Comet", "broke": "the garden gate"},
            {"animal": "rabbit", "breed": "a lop-eared bunny", "pet": "Clover", "broke": "a phone charger"},
            {"animal": "cat", "breed": "a shy black kitten", "pet": "Pepper", "broke": "my glasses"},
            {"animal": "dog", "breed": "a sheepdog puppy", "pet": "Moss", "broke": "the kitchen bin"},
        ],
        [
            "Big news, we adopted {breed} from the shelter on Saturday. We named {animal_it} {pet}.",
            "So I caved and brought home {breed} this week! {pet} is asleep on my feet as I type.",
        ],
        [
            "{pet} chewed through {broke} last night, I could not even be angry.",
            "Guess who destroyed {broke}? {pet}, of course. Little menace.",
        ],
        ["What kind of animal did {p} adopt?", "What is the name of {p}'s new pet?"],
        ["What did {p}'s {animal} break?", "Which of {p}'s things got wrecked by the {animal}?"],
        ["When did {p} get {p_their} {animal}?", "When did {p} bring home a pet from the shelter?"],
        ["Aww, I need photos immediately.", "That is adorable, give {pet} a scratch from me."],
    ),
    Kind(
        "job",
        ("Which employer took {p} on as {role}?", "tell"),
        [
            {"role": "a data analyst", "company": "a solar panel startup", "boss": "Greta"},
            {"role": "a pastry chef", "company": "a hotel by the harbour", "boss": "Ramon"},
            {"role": "a junior architect", "company": "a firm that designs schools", "boss": "Helen"},
            {"role": "a paramedic", "company": "the county ambulance service", "boss": "Ibrahim"},
            {"role": "a museum guide", "company": "the maritime museum", "boss": "Claudette"},
            {"role": "a sound engineer", "company": "a podcast studio", "boss": "Wes"},
        ],
        [
            "I got the offer! Starting next month as {role} at {company}.",
            "Remember that interview I was nervous about? They hired me, I'll be {role} at {company}.",
        ],
        [
            "{boss} asked me to lead the new project already, after only a few weeks.",
            "Had lunch with {boss} today, she wants me to present at the quarterly meeting.",
        ],
        ["What new position did {p} accept?", "Where is {p} working now?"],
        [
            "What did {p}'s manager at the new job ask of {p_them}?",
            "How did {p}'s boss at the new workplace show trust in {p_them}?",
        ],
        ["When did {p} find out {p_they} got the job?", "When did {p} accept a job offer?"],
        ["Congratulations, that is huge!", "You earned it, honestly."],
    ),
    Kind(
        "trip",
        ("What did {p} get to see in {place}?", "tell"),
        [
            {"place": "Lisbon", "sight": "the tram up to the castle", "food": "custard tarts"},
            {"place": "Kyoto", "sight": "a bamboo forest at dawn", "food": "matcha everything"},
            {
                "place": "the Scottish Highlands",
                "sight": "a loch with no one around",
                "food": "smoked salmon",
            },
            {"place": "Mexico City", "sight": "the pyramids at Teotihuacan", "food": "tacos al pastor"},
            {"place": "Iceland", "sight": "a glacier lagoon", "food": "lamb soup"},
            {"place": "Istanbul", "sight": "a ferry across the Bosphorus", "food": "simit every morning"},
        ],
        [
            "Just got back from {place}! The highlight was {sight}.",
            "Ten days in {place} and I already want to go back. We saw {sight}.",
        ],
        [
            "Still dreaming about the {food} we had in {place}.",
            "I tried to recreate the {food} from {place} at home, total failure.",
        ],
        ["Where did {p} travel to on holiday?", "What was the best part of {p}'s vacation?"],
        [
            "What food from {p}'s holiday destination does {p_they} miss?",
            "What dish did {p} try to cook after the trip abroad?",
        ],
        ["When did {p} come back from {p_their} trip?", "When did {p} return from holiday?"],
        ["Jealous! Sounds unreal.", "I need to hear everything, send pictures."],
    ),
    Kind(
        "class",
        ("Who teaches {p}'s {skill} class?", "both"),
        [
            {"skill": "pottery", "teacher": "Odile", "made": "a lopsided teapot"},
            {"skill": "salsa dancing", "teacher": "Rafa", "made": "a full routine without tripping"},
            {"skill": "Italian", "teacher": "Signora Bassi", "made": "a whole phone call with a plumber"},
            {"skill": "woodworking", "teacher": "Mr Adeyemi", "made": "a small bookshelf"},
            {"skill": "watercolour painting", "teacher": "Fenna", "made": "a picture of the harbour"},
            {"skill": "rock climbing", "teacher": "Juno", "made": "the overhang route"},
        ],
        [
            "I signed up for {skill} lessons on Tuesday evenings, first one was chaos but fun.",
            "Started a {skill} course at the community centre, the teacher is called {teacher}.",
        ],
        [
            "{teacher} said I'm improving, I managed {made} this week!",
            "Proud moment: {made}. {teacher} even clapped.",
        ],
        ["What hobby did {p} start learning?", "What course did {p} enrol in?"],
        [
            "What did {p} manage to do in {p_their} evening course?",
            "What achievement did {p}'s instructor praise?",
        ],
        ["When did {p} start taking lessons?", "When did {p} sign up for a course?"],
        ["Love that for you.", "Okay I might join you at some point."],
    ),
    Kind(
        "move",
        ("How does {p} know {neighbour}?", "follow"),
        [
            {"area": "a flat near the canal", "neighbour": "Agnes", "issue": "the boiler"},
            {"area": "a little house outside town", "neighbour": "Mr Lindqvist", "issue": "a leaking roof"},
            {"area": "a studio above a bakery", "neighbour": "Bao", "issue": "the noisy radiator"},
            {"area": "a shared house with two nurses", "neighbour": "Ferdinand", "issue": "the broken dryer"},
            {"area": "an apartment on the tenth floor", "neighbour": "Mrs Okafor", "issue": "the lift"},
            {"area": "a cottage by the river", "neighbour": "Pádraig", "issue": "damp in the bedroom"},
        ],
        [
            "We finally moved! It's {area}, boxes everywhere still.",
            "Got the keys to {area} yesterday, I can't stop smiling.",
        ],
        [
            "{neighbour} from next door helped me fix {issue}, what a legend.",
            "Met {neighbour} properly today, {neighbour_they} knows a plumber, so {issue} is sorted.",
        ],
        ["What kind of place did {p} move into?", "Where does {p} live now?"],
        [
            "Who helped {p} with a problem in {p_their} new home?",
            "What got fixed at {p}'s new place with a neighbour's help?",
        ],
        ["When did {p} move house?", "When did {p} get the keys to {p_their} new home?"],
        ["Housewarming when?", "New place, new you!"],
    ),
    Kind(
        "injury",
        ("Why is {p} seeing {healer}?", "both"),
        [
            {"hurt": "sprained my ankle", "how": "on a wet staircase", "healer": "a physio named Ola"},
            {"hurt": "broke my wrist", "how": "falling off my bike", "healer": "a hand specialist"},
            {"hurt": "pulled a muscle in my back", "how": "lifting a sofa", "healer": "an osteopath"},
            {"hurt": "cracked a rib", "how": "slipping on ice", "healer": "my GP"},
            {"hurt": "twisted my knee", "how": "playing five-a-side", "healer": "a sports clinic"},
            {"hurt": "burned my hand", "how": "grabbing a hot pan", "healer": "the nurse at urgent care"},
        ],
        [
            "Ugh, I {hurt} {how}. Couch life for a while.",
            "Small disaster: I {hurt}, {how} of all things.",
        ],
        [
            "Seeing {healer} twice a week now, it's slowly getting better.",
            "{healer_cap} says I'll be fine in a month if I behave.",
        ],
        ["How did {p} get injured?", "What happened to {p} physically?"],
        [
            "Who is treating {p}'s injury?",
            "Who is helping {p} recover from the accident?",
        ],
        ["When did {p} get hurt?", "When did {p} have the accident?"],
        ["Oh no, take it easy!", "That sounds so painful, sending soup."],
    ),
    Kind(
        "concert",
        ("Where did {p} see {band} play?", "tell"),
        [
            {"band": "Fleet Foxes", "venue": "an old church", "song": "the slow one about winter"},
            {"band": "a brass band from New Orleans", "venue": "the docks", "song": "a jazz funeral march"},
            {"band": "Björk", "venue": "the opera house", "song": "the one with the swans"},
            {"band": "a Tuareg guitar group", "venue": "a tiny basement bar", "song": "a twenty-minute jam"},
            {"band": "the city orchestra", "venue": "the park", "song": "Dvořák's ninth"},
            {"band": "a K-pop group", "venue": "the stadium", "song": "their debut single"},
        ],
        [
            "Went to see {band} at {venue} last night, my ears are still ringing.",
            "Surprise tickets to {band}! Played at {venue}, unforgettable.",
        ],
        [
            "Can't get {song} out of my head since that gig.",
            "Listening to {song} on repeat, it takes me straight back to that night.",
        ],
        ["Which artist did {p} see live?", "Where was the show {p} went to?"],
        [
            "What piece from the live show is stuck in {p}'s head?",
            "Which song from the performance does {p} keep replaying?",
        ],
        ["When did {p} go to a concert?", "When did {p} see a live performance?"],
        ["So jealous, I love them.", "Best way to spend an evening."],
    ),
    Kind(
        "family",
        ("What is the news about {p}'s {relative} {rname}?", "tell"),
        [
            {
                "relative": "sister",
                "rname": "Lena",
                "news": "is expecting twins",
                "gift": "a knitted blanket",
            },
            {
                "relative": "brother",
                "rname": "Omar",
                "news": "got engaged in Paris",
                "gift": "a bottle of port",
            },
            {"relative": "mum", "rname": "Rosa", "news": "retired after thirty years", "gift": "a telescope"},
            {"relative": "cousin", "rname": "Jules", "news": "opened a bike shop", "gift": "a shop sign"},
            {"relative": "dad", "rname": "Kwame", "news": "ran his first marathon", "gift": "a framed medal"},
            {"relative": "grandmother", "rname": "Hedda", "news": "turned ninety", "gift": "a photo album"},
        ],
        [
            "Family update: my {relative} {news}! Everyone is emotional.",
            "Had the best phone call, my {relative} {rname} {news}.",
        ],
        [
            "I made {rname} {gift}, {rname_they} actually cried.",
            "Finally gave {rname} {gift}, took me weeks.",
        ],
        ["What big news did {p}'s {relative} share?", "What happened in {p}'s family recently?"],
        [
            "What present did {p} give {p_their} {relative}?",
            "What did {p} make or buy for the relative with the big news?",
        ],
        ["When did {p} hear the news about {p_their} {relative}?", "When did {p} get the family update?"],
        ["Tell them congratulations from me!", "That's wonderful news."],
    ),
    Kind(
        "garden",
        ("What did {p} plant in {plot}?", "tell"),
        [
            {"crop": "tomatoes", "plot": "an allotment by the railway", "pest": "slugs"},
            {"crop": "chillies", "plot": "the balcony", "pest": "aphids"},
            {"crop": "strawberries", "plot": "raised beds in the backyard", "pest": "blackbirds"},
            {"crop": "pumpkins", "plot": "a community garden", "pest": "a fox"},
            {"crop": "herbs", "plot": "window boxes", "pest": "greenfly"},
            {"crop": "potatoes", "plot": "my uncle's field", "pest": "the neighbour's chickens"},
        ],
        [
            "I finally got {plot} and planted {crop}, fingers crossed.",
            "New project: growing {crop} in {plot}.",
        ],
        [
            "War update: {pest} ate half of everything I planted.",
            "I'm losing the battle against {pest}, any tips?",
        ],
        ["What is {p} growing?", "Where does {p} do {p_their} gardening?"],
        [
            "What is attacking {p}'s {crop}?",
            "What keeps damaging the plants {p} put in?",
        ],
        ["When did {p} start {p_their} garden?", "When did {p} plant {p_their} first crop?"],
        ["You'll be self-sufficient in no time.", "Save me some!"],
    ),
    Kind(
        "car",
        ("What kind of vehicle is {named}?", "tell"),
        [
            {"vehicle": "a second-hand electric car", "trouble": "the charging cable", "named": "Volty"},
            {"vehicle": "a vintage camper van", "trouble": "the clutch", "named": "Marigold"},
            {"vehicle": "a cargo bike", "trouble": "a flat tyre", "named": "the Beast"},
            {"vehicle": "a tiny old hatchback", "trouble": "the exhaust", "named": "Pickle"},
            {"vehicle": "a motorbike", "trouble": "the battery", "named": "Storm"},
            {"vehicle": "a hybrid estate car", "trouble": "a cracked windscreen", "named": "Bertha"},
        ],
        [
            "I bought {vehicle}! I'm calling it {named}.",
            "Big purchase this week: {vehicle}. Naming it {named} obviously.",
        ],
        [
            "{named} let me down, {trouble} gave up on the motorway.",
            "Spent Saturday at the garage, {named} needed {trouble} replaced.",
        ],
        ["What vehicle did {p} buy?", "What did {p} purchase to get around?"],
        [
            "What went wrong with {p}'s new vehicle?",
            "Which part of {p}'s recent purchase needed repair?",
        ],
        ["When did {p} buy {p_their} new ride?", "When did {p} get {p_their} vehicle?"],
        ["Road trip!", "Nice, does it have a cassette player?"],
    ),
    Kind(
        "book",
        ("Who wrote {book}?", "tell"),
        [
            {
                "book": "a novel about lighthouse keepers",
                "club": "the library book club",
                "author": "Ines Varga",
            },
            {"book": "a biography of Ada Lovelace", "club": "a group of colleagues", "author": "Paul Reyes"},
            {"book": "a thriller set in Oslo", "club": "my neighbours", "author": "Kari Moen"},
            {
                "book": "a memoir by a mountain guide",
                "club": "an online reading circle",
                "author": "Tenzin Dorje",
            },
            {"book": "a history of spices", "club": "the café book club", "author": "Miriam Haddad"},
            {"book": "a short story collection", "club": "my old uni friends", "author": "Chidi Obi"},
        ],
        [
            "I can't put down {book}, it's by {author}.",
            "Reading {book} by {author} and I keep staying up too late.",
        ],
        [
            "Hosted {club} to discuss {author}'s book, the arguments were intense.",
            "{club} loved it too, we're doing another one by {author}.",
        ],
        ["What book is {p} reading?", "Who wrote the book {p} could not stop reading?"],
        [
            "Who did {p} discuss {p_their} latest read with?",
            "Which group read the same book as {p}?",
        ],
        ["When did {p} mention the book {p_they} couldn't put down?", "When was {p} hooked on a new book?"],
        ["Adding it to my list.", "Ooh, no spoilers please."],
    ),
    Kind(
        "volunteer",
        ("What does {p} do at {cause}?", "tell"),
        [
            {"cause": "a food bank", "task": "sorting donations", "met": "a retired sailor"},
            {"cause": "an animal shelter", "task": "walking the dogs", "met": "a vet student"},
            {
                "cause": "a refugee language café",
                "task": "teaching English",
                "met": "a pharmacist from Aleppo",
            },
            {"cause": "a beach clean-up group", "task": "collecting plastic", "met": "a marine biologist"},
            {"cause": "a hospice", "task": "reading to patients", "met": "a former jazz singer"},
            {
                "cause": "a youth football club",
                "task": "coaching the under-tens",
                "met": "an ex-pro goalkeeper",
            },
        ],
        [
            "I started volunteering at {cause}, mostly {task} on Sundays.",
            "Spent my Sunday {task} for {cause}, I want to keep doing it.",
        ],
        [
            "At the volunteering I met {met}, we talked for hours.",
            "The best part of Sundays now is chatting with {met}.",
        ],
        ["Where does {p} volunteer?", "What does {p} do on Sundays to help out?"],
        [
            "Who did {p} get to know through {p_their} charity work?",
            "Which interesting person did {p} meet while giving time to a good cause?",
        ],
        ["When did {p} start volunteering?", "When did {p} begin helping at a charity?"],
        ["That's really lovely.", "You're a good person, you know that?"],
    ),
]

SMALL_TALK = [
    "How was your week?",
    "Work has been relentless, I barely had time to eat lunch.",
    "The weather turned again, rain all day.",
    "Did you watch the match on Sunday?",
    "I slept for eleven hours last night, no regrets.",
    "Honestly I just need a quiet weekend.",
    "My phone screen cracked again, typical.",
    "We ordered pizza and watched a terrible film.",
    "Traffic this morning was a nightmare.",
    "I've been trying to drink less coffee, it's not going well.",
    "Any plans for the weekend?",
    "I think I'm coming down with a cold.",
    "My neighbour's dog barked all night, I'm a zombie.",
    "Finally cleaned the fridge, you don't want to know.",
    "Have you tried that new bakery on the corner?",
    "It's been one of those weeks where nothing goes to plan.",
    "I started a new series, can't remember the name, something about detectives.",
    "We should get dinner soon.",
    "My manager scheduled a meeting at 8 am, who does that?",
    "Bought new running shoes, now I have to actually run.",
    "The trains were cancelled again.",
    "I've been meaning to call my mum all week.",
    "Did I tell you I'm trying to learn to cook properly?",
    "So tired, but in a good way.",
    "The garden centre was packed today.",
    "I got a parking ticket, ten minutes late, unbelievable.",
    "Our office plants are all dying.",
    "I found an old photo album while tidying, so many bad haircuts.",
]
REPLIES = [
    "Same here, honestly.",
    "Haha, classic.",
    "Oh no!",
    "That sounds rough.",
    "Ha, I know that feeling.",
    "Not bad, busy but fine.",
    "Tell me about it.",
    "Sounds nice actually.",
    "You deserve a break.",
    "Ugh, sorry.",
    "Yes! Let's do it.",
    "Fair enough.",
]
OPENERS = [
    "Hey {o}! Long time no chat.",
    "Hi {o}, got a minute?",
    "Morning! How are things?",
    "Hey you, what's new?",
    "Evening {o}! Guess what.",
]
CLOSERS = [
    "Okay, I have to run. Talk soon!",
    "Speak later, take care.",
    "Right, bedtime for me. Night!",
    "Catch you next week.",
]
PRONOUNS = {
    "Noor": ("she", "her", "her"),
    "Elliot": ("he", "him", "his"),
    "Priya": ("she", "her", "her"),
    "Jonas": ("he", "him", "his"),
    "Marta": ("she", "her", "her"),
    "Kofi": ("he", "him", "his"),
    "Sven": ("he", "him", "his"),
    "Ayumi": ("she", "her", "her"),
    "Lucia": ("she", "her", "her"),
    "Deshawn": ("he", "him", "his"),
    "Ilse": ("she", "her", "her"),
    "Tomasz": ("he", "him", "his"),
}
NEIGHBOUR_THEY = {"Agnes": "she", "Mrs Okafor": "she", "Bao": "he"}
RELATIVE_THEY = {"sister": "she", "mum": "she", "grandmother": "she", "cousin": "they"}


@dataclass
class Event:
    kind: Kind
    teller: str
    other: str
    fill: dict[str, str]
    tell_session: int
    follow_session: int
    tell_turn: str = ""
    follow_turn: str = ""


def _fields(event: Event) -> dict[str, str]:
    they, them, their = PRONOUNS[event.teller]
    fields = dict(event.fill)
    fields.update(p=event.teller, o=event.other, p_they=they, p_them=them, p_their=their)
    fields["animal_it"] = "her" if fields.get("pet") in {"Saffron", "Clover", "Pepper"} else "him"
    fields["neighbour_they"] = NEIGHBOUR_THEY.get(fields.get("neighbour", ""), "he")
    relative = fields.get("relative", "")
    fields["rname_they"] = RELATIVE_THEY.get(relative, "he")
    healer = fields.get("healer", "")
    fields["healer_cap"] = healer[:1].upper() + healer[1:]
    return fields


def _conversation(
    number: int, pair: tuple[str, str], rng: random.Random
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    sessions = 9 if number % 2 else 8
    kinds = rng.sample(KINDS, 10)
    events: list[Event] = []
    for at, kind in enumerate(kinds):
        teller, other = pair if at % 2 == 0 else pair[::-1]
        fill = kind.fills[(number + at) % len(kind.fills)]
        tell = rng.randrange(0, sessions - 2)
        follow = rng.randrange(tell + 1, sessions)
        events.append(Event(kind, teller, other, fill, tell, follow))
    start = datetime(2023, 1, 9, tzinfo=UTC) + timedelta(days=11 * number)
    when = start
    out_sessions: list[dict[str, Any]] = []
    for session in range(sessions):
        when += timedelta(days=rng.randrange(4, 23), hours=rng.randrange(-3, 4))
        turns: list[tuple[str, str, Event | None, str]] = []
        first = rng.choice(pair)
        second = pair[1] if first == pair[0] else pair[0]
        turns.append((first, rng.choice(OPENERS).format(o=second), None, ""))
        turns.append((second, rng.choice(["Hey!", "Hi hi.", "Hello! All good, you?", "Heyyy."]), None, ""))
        beats: list[tuple[str, Event | None]] = [("tell", e) for e in events if e.tell_session == session]
        beats += [("follow", e) for e in events if e.follow_session == session]
        beats += [("talk", None)] * rng.randrange(2, 5)
        rng.shuffle(beats)
        for beat, event in beats:
            if event is None:
                speaker = rng.choice(pair)
                listener = pair[1] if speaker == pair[0] else pair[0]
                turns.append((speaker, rng.choice(SMALL_TALK), None, ""))
                turns.append((listener, rng.choice(REPLIES), None, ""))
                continue
            fields = _fields(event)
            phrasing = rng.choice(event.kind.tell if beat == "tell" else event.kind.follow)
            turns.append((event.teller, phrasing.format(**fields), event, beat))
            reaction = rng.choice(event.kind.reactions or REPLIES) if beat == "tell" else rng.choice(REPLIES)
            turns.append((event.other, reaction.format(**fields), None, ""))
            if rng.random() < 0.4:
                turns.append(
                    (
                        event.teller,
                        rng.choice(["Thanks!", "I know, right?", "Ha, yes.", "Will do."]),
                        None,
                        "",
                    )
                )
        turns.append((rng.choice(pair), rng.choice(CLOSERS), None, ""))
        rows = []
        for index, (speaker, text, event, beat) in enumerate(turns, start=1):
            turn_id = f"C{number + 1}:D{session + 1}:{index}"
            if event is not None:
                if beat == "tell":
                    event.tell_turn = turn_id
                else:
                    event.follow_turn = turn_id
            rows.append({"id": turn_id, "speaker": speaker, "text": text})
        out_sessions.append({"id": f"C{number + 1}:D{session + 1}", "date": when.isoformat(), "turns": rows})
    questions: list[dict[str, Any]] = []
    for event in events:
        fields = _fields(event)
        kind = event.kind
        for text in kind.single:
            questions.append(_question(number, "single-hop", text.format(**fields), [event.tell_turn]))
        echo, answered_by = kind.echo
        by_beat = {"tell": [event.tell_turn], "follow": [event.follow_turn]}
        evidence = by_beat.get(answered_by, [event.tell_turn, event.follow_turn])
        questions.append(_question(number, "single-hop", echo.format(**fields), evidence))
        questions.append(
            _question(
                number,
                "multi-hop",
                rng.choice(kind.multi).format(**fields),
                [event.follow_turn, event.tell_turn],
            )
        )
        questions.append(
            _question(number, "temporal", rng.choice(kind.when).format(**fields), [event.tell_turn])
        )
    conversation = {"id": f"C{number + 1}", "speakers": list(pair), "sessions": out_sessions}
    return conversation, questions


def _question(number: int, category: str, text: str, evidence: list[str]) -> dict[str, Any]:
    return {"conversation": f"C{number + 1}", "category": category, "question": text, "evidence": evidence}


DAY_QUESTIONS = [
    "What news did {p} share on {date}?",
    "What did {p} tell {o} about on {date}?",
    "What was new with {p} on {date}?",
]
MONTH_QUESTIONS = ["What did {p} tell {o} about in {date}?", "What news did {p} have in {date}?"]


def _dated_questions(
    conversations: list[dict[str, Any]], questions: list[dict[str, Any]], rng: random.Random
) -> list[dict[str, Any]]:
    """The ``dated`` questions (module docs): one per speaker and session in which the speaker
    told of an event (the turns the ``temporal`` questions are answered by), naming the day in
    one of three forms, or for about a third the month."""
    said: dict[str, tuple[str, datetime]] = {}
    for conversation in conversations:
        for session in conversation["sessions"]:
            when = datetime.fromisoformat(session["date"])
            said.update((turn["id"], (turn["speaker"], when)) for turn in session["turns"])
    told: dict[tuple[str, str], list[str]] = {}  # (conversation, speaker) -> the turns telling an event
    for question in questions:
        if question["category"] == "temporal":
            turn = question["evidence"][0]
            told.setdefault((question["conversation"], said[turn][0]), []).append(turn)
    out: list[dict[str, Any]] = []
    for conversation in conversations:
        name = conversation["id"]
        for speaker in conversation["speakers"]:
            other = next(s for s in conversation["speakers"] if s != speaker)
            turns = sorted(told.get((name, speaker), []), key=lambda t: said[t][1])
            for day in sorted({said[t][1].date() for t in turns}):
                if rng.random() < 1 / 3:
                    month = (day.year, day.month)
                    evidence = [t for t in turns if (said[t][1].year, said[t][1].month) == month]
                    phrasing, date = rng.choice(MONTH_QUESTIONS), day.strftime("%B %Y")
                else:
                    evidence = [t for t in turns if said[t][1].date() == day]
                    phrasing = rng.choice(DAY_QUESTIONS)
                    date = rng.choice(
                        [f"{day:%B} {day.day}, {day.year}", f"{day.day} {day:%B} {day.year}", day.isoformat()]
                    )
                text = phrasing.format(p=speaker, o=other, date=date)
                out.append(
                    {"conversation": name, "category": "dated", "question": text, "evidence": evidence}
                )
    return out


def main() -> None:
    rng = random.Random(SEED)
    conversations, questions = [], []
    for number, pair in enumerate(PAIRS):
        conversation, asked = _conversation(number, pair, rng)
        conversations.append(conversation)
        questions.extend(asked)
    questions.extend(_dated_questions(conversations, questions, random.Random(SEED + 1)))
    for at, question in enumerate(questions, start=1):
        question["id"] = f"Q{at}"
    payload = {
        "about": (
            "agentkeep's recall evaluation set, written by bench/data/make_recall_set.py (seeded, "
            "deterministic): conversations between two friends over dated sessions, and questions "
            "labelled with the ids of the turns that answer them."
        ),
        "licence": "MIT, as agentkeep",
        "conversations": conversations,
        "questions": questions,
    }
    OUT.write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    turns = sum(len(s["turns"]) for c in conversations for s in c["sessions"])
    print(f"{OUT.name}: {len(conversations)} conversations, {turns} turns, {len(questions)} questions")


if __name__ == "__main__":
    main()
