"""A generated knowledge world for search-QA that needs no download and no pretrained knowledge.

Fictional countries, cities, rivers, companies and people (names built from random syllables, every name
word unique in the world) have attributes and relations. Each entity is rendered as one encyclopedia-style
paragraph; questions are single-hop (the answer is in the paragraph of the entity the question names) or
two-hop (that paragraph names a bridge entity whose own paragraph holds the answer). The question never
contains its answer, and the world depends only on its seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ecpo_gym.searchqa.corpus import Corpus, Document, make_contents

_ONSETS = ["b", "br", "d", "dr", "f", "g", "k", "kl", "l", "m", "n", "p", "r", "s", "st", "t", "th", "v",
           "vr", "z"]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "ou", "y"]
_CODAS = ["", "", "", "n", "r", "l", "s", "m", "x"]
_CITY_SUFFIXES = ["holt", "mere", "grad", "ford", "wick", "ster", "vale", "burg"]
_COUNTRY_SUFFIXES = ["ia", "ora", "and", "esh", "istan", "onia"]
_COMPANY_KINDS = ["Works", "Foundry", "Mills", "Company", "Guild", "Ironworks"]
_INDUSTRIES = ["shipbuilding", "textile", "clockmaking", "glassware", "printing", "brewing", "cartography",
               "ceramics", "telegraph", "bicycle"]
_OCCUPATIONS = ["clockmaker", "cartographer", "glassblower", "engineer", "botanist", "architect", "printer",
                "chemist", "composer", "surveyor", "bookbinder", "astronomer"]


@dataclass
class Country:
    name: str
    independence_year: int
    capital: str = ""


@dataclass
class City:
    name: str
    country: str
    river: str
    founded: int


@dataclass
class Company:
    name: str
    industry: str
    city: str
    founded: int
    founder: str = ""


@dataclass
class Person:
    name: str
    surname: str
    born: int
    birthplace: str
    occupation: str
    employer: str


@dataclass(frozen=True)
class WorldQuestion:
    """A question, its answers, the entities whose paragraphs support it (in hop order), and its kind."""

    question: str
    answers: tuple[str, ...]
    supporting_titles: tuple[str, ...]
    kind: str
    hops: int


@dataclass
class KnowledgeWorld:
    seed: int
    countries: list[Country] = field(default_factory=list)
    cities: list[City] = field(default_factory=list)
    companies: list[Company] = field(default_factory=list)
    people: list[Person] = field(default_factory=list)
    rivers: list[str] = field(default_factory=list)


class _NameMaker:
    """Random pronounceable words; no word is handed out twice (case-insensitive)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def word(self, syllables: int, suffix: str = "") -> str:
        while True:
            stem = "".join(self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) + self.rng.choice(_CODAS)
                           for _ in range(syllables))
            word = (stem + suffix).capitalize()
            if word.lower() not in self.used and len(word) >= 4:
                self.used.add(word.lower())
                return word


def generate_world(seed: int = 0, *, n_countries: int = 5, n_cities: int = 16, n_rivers: int = 8,
                   n_companies: int = 12, n_people: int = 30) -> KnowledgeWorld:
    """The world of ``seed`` (same seed, same world)."""
    if min(n_countries, n_cities, n_rivers, n_companies, n_people) < 1 or n_cities < n_countries:
        raise ValueError("every entity count must be >= 1 and n_cities >= n_countries")
    rng = random.Random(seed)
    names = _NameMaker(rng)
    world = KnowledgeWorld(seed=seed)
    world.rivers = [names.word(2) for _ in range(n_rivers)]
    world.countries = [Country(names.word(rng.choice([1, 2]), rng.choice(_COUNTRY_SUFFIXES)),
                               rng.randrange(1400, 1960)) for _ in range(n_countries)]
    for index in range(n_cities):
        country = world.countries[index] if index < n_countries else rng.choice(world.countries)
        world.cities.append(City(names.word(rng.choice([1, 2]), rng.choice(_CITY_SUFFIXES)), country.name,
                                 rng.choice(world.rivers), rng.randrange(900, 1800)))
    for index, country in enumerate(world.countries):
        country.capital = world.cities[index].name  # city i < n_countries lies in country i
    for _ in range(n_companies):
        world.companies.append(Company(f"{names.word(rng.choice([2, 3]))} {rng.choice(_COMPANY_KINDS)}",
                                       rng.choice(_INDUSTRIES), rng.choice(world.cities).name,
                                       rng.randrange(1800, 1990)))
    for _ in range(n_people):
        first, surname = names.word(rng.choice([1, 2])), names.word(rng.choice([2, 3]))
        world.people.append(Person(f"{first} {surname}", surname, rng.randrange(1850, 1990),
                                   rng.choice(world.cities).name, rng.choice(_OCCUPATIONS),
                                   rng.choice(world.companies).name))
    for company in world.companies:
        company.founder = rng.choice(world.people).name
    return world


def _article(word: str) -> str:
    return "an" if word[0].lower() in "aeiou" else "a"


def world_paragraphs(world: KnowledgeWorld) -> list[tuple[str, str]]:
    """``(title, paragraph)`` per entity, encyclopedia style; each entity's paragraph names its relations."""
    paragraphs = []
    for country in world.countries:
        paragraphs.append((country.name, (f"{country.name} is a country whose capital is {country.capital}. "
                                         f"{country.name} declared its independence in {country.independence_year}.")))
    for city in world.cities:
        paragraphs.append((city.name, (f"{city.name} is a city in {city.country}. It lies on the {city.river} "
                                      f"River and was founded in {city.founded}.")))
    for river in world.rivers:
        towns = sorted(city.name for city in world.cities if city.river == river)
        course = f"It flows past {', '.join(towns)}." if towns else "No city lies on its banks."
        paragraphs.append((f"{river} River", f"The {river} River is a river. {course}"))
    for company in world.companies:
        paragraphs.append((company.name, (f"{company.name} is {_article(company.industry)} {company.industry} company "
                                         f"headquartered in {company.city}. It was founded in {company.founded} "
                                         f"by {company.founder}.")))
    for person in world.people:
        paragraphs.append((person.name, (f"{person.name} (born {person.born}) is {_article(person.occupation)} "
                                        f"{person.occupation}. Born in {person.birthplace}, {person.surname} "
                                        f"later joined {person.employer}, where {person.surname} spent most of "
                                        "a long career.")))
    return paragraphs


def world_corpus(world: KnowledgeWorld) -> Corpus:
    """The world's paragraphs as a corpus (ids ``"0"``, ``"1"``, … in paragraph order)."""
    return Corpus((Document(str(i), make_contents(title, text))
                   for i, (title, text) in enumerate(world_paragraphs(world))),
                  name=f"generated-world-{world.seed}")


def world_questions(world: KnowledgeWorld) -> list[WorldQuestion]:
    """Every question the world supports, in a fixed order: single-hop first, then two-hop."""
    city = {c.name: c for c in world.cities}
    company = {c.name: c for c in world.companies}
    person = {p.name: p for p in world.people}
    single: list[WorldQuestion] = []
    double: list[WorldQuestion] = []

    def river_answers(river: str) -> tuple[str, ...]:
        return (river, f"{river} River")

    for c in world.countries:
        single.append(WorldQuestion(f"What is the capital of {c.name}?", (c.capital,), (c.name,),
                                    "country_capital", 1))
    for c in world.cities:
        single.append(WorldQuestion(f"In which country is {c.name}?", (c.country,), (c.name,), "city_country", 1))
        single.append(WorldQuestion(f"On which river does {c.name} lie?", river_answers(c.river), (c.name,),
                                    "city_river", 1))
    for c in world.companies:
        single.append(WorldQuestion(f"In what year was {c.name} founded?", (str(c.founded),), (c.name,),
                                    "company_founded", 1))
        single.append(WorldQuestion(f"In which city is {c.name} headquartered?", (c.city,), (c.name,),
                                    "company_city", 1))
        hq = city[c.city]
        double.append(WorldQuestion(f"In which country is {c.name} headquartered?", (hq.country,),
                                    (c.name, hq.name), "company_country", 2))
        founder = person[c.founder]
        double.append(WorldQuestion(f"In which city was the founder of {c.name} born?", (founder.birthplace,),
                                    (c.name, founder.name), "company_founder_birthplace", 2))
    for p in world.people:
        single.append(WorldQuestion(f"In what year was {p.name} born?", (str(p.born),), (p.name,),
                                    "person_born", 1))
        single.append(WorldQuestion(f"In which city was {p.name} born?", (p.birthplace,), (p.name,),
                                    "person_birthplace", 1))
        single.append(WorldQuestion(f"What is the occupation of {p.name}?", (p.occupation,), (p.name,),
                                    "person_occupation", 1))
        single.append(WorldQuestion(f"Which company did {p.name} join?", (p.employer,), (p.name,),
                                    "person_employer", 1))
        home, employer = city[p.birthplace], company[p.employer]
        double.append(WorldQuestion(f"In which country was {p.name} born?", (home.country,),
                                    (p.name, home.name), "person_birth_country", 2))
        double.append(WorldQuestion(f"On which river lies the city where {p.name} was born?",
                                    river_answers(home.river), (p.name, home.name), "person_birth_river", 2))
        double.append(WorldQuestion(f"In which city is the company that {p.name} joined headquartered?",
                                    (employer.city,), (p.name, employer.name), "person_employer_city", 2))
        double.append(WorldQuestion(f"In what year was the company that {p.name} joined founded?",
                                    (str(employer.founded),), (p.name, employer.name), "person_employer_founded", 2))
    return single + double
