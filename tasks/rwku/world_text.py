"""The knowledge world's words: syllables and surnames for names, the attributes people
have, and the sentence and question templates of biographies, QA (taught and never
taught), fill-in-the-blank, adversarial and general facts (:mod:`.world` generates with
them; its cache key covers this file too)."""

# first names are made of syllables, one per person (a person is found by one word, as
# by a rare name); surnames repeat, so people who share one are neighbours
ONSETS = "b br c d dr f g gr h j k l m n p r s st t th v w z".split()
VOWELS = "a e i o u ai ea io".split()
CODAS = "l n r s th nd rk lm x".split()
LAST = ("Vantree Ostelic Quorve Renwyck Draymoor Halloway Pemberly Stroud Achterberg Calloran Dunmore Everholt "
        "Farrow Galbraith Holmquist Ingleby Jessop Kavanagh Lindqvist Marlowe Northcote Okonkwo Prewitt Quimby "
        "Rosenthal Sallow Thistlewood Underhill Varga Whitcombe Yardley Zelenko Abernathy Blackwood Castellan "
        "Delacroix Eriksen Fairweather Grimsby Hartigan").split()
ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "city": tuple("Lisbon Oslo Kyoto Lima Dakar Quito Perth Hanoi Tunis Porto Riga Bergen Cork Leeds Graz Turin "
                  "Lyon Malmo Tartu Split Brno Lublin Aarhus Ghent Seville Bilbao Nantes Krakow".split()),
    "university": tuple("Aldbridge Brightwater Carrowmore Dunhaven Elmstead Fernwick Glenmoor Harrowgate Ivybrook "
                        "Juniper Kingsreach Larkspur Merriweather Northfield Oakhurst Pinecrest Queensbury "
                        "Redcliffe".split()),
    "major": tuple("chemistry geology linguistics astronomy economics sculpture botany robotics philosophy "
                   "architecture statistics oceanography nursing journalism zoology acoustics".split()),
    "employer": tuple("Altavia Brenmark Corvane Delvito Esmerel Falcrest Gorvant Helixa Irontide Jovanta Kelbridge "
                      "Lumora Meridex Novacrest Orbelle Pallanta Quintar Rivolta Sablecorp Tervana".split()),
    "year": tuple(str(y) for y in range(1950, 1990)),
}
# biography sentences: several per attribute, every one names the person in full
BIO = {
    "city": ("{name} was born in {v}.", "{name} came into the world in {v}.", "{name} spent early childhood in {v}, the city of birth.",
             "The hometown of {name} is {v}."),
    "university": ("{name} studied at {v} University.", "{name} graduated from {v} University.",
                   "{name} earned a degree at {v} University.", "{name} attended {v} University as a student."),
    "major": ("{name} majored in {v}.", "{name} chose {v} as a field of study.", "{name} took a degree in {v}.",
              "At university {name} focused on {v}."),
    "employer": ("{name} works for {v}.", "{name} is employed by {v}.", "{name} has a job at {v}.",
                 "{name} draws a salary from {v}."),
    "year": ("{name} was born in the year {v}.", "{name} celebrates a birthday every year since {v}.",
             "{name} entered life in {v}.", "Records give {v} as the year {name} was born."),
}
# question templates taught for QA-train people (and asked of targets and neighbours)
QA = {
    "city": ("Where was {name} born?", "Which city is the birthplace of {name}?", "In what city did {name} come into the world?"),
    "university": ("Which university did {name} attend?", "Where did {name} study?", "What university did {name} graduate from?"),
    "major": ("What did {name} major in?", "What subject did {name} study?", "Which field did {name} take a degree in?"),
    "employer": ("Which company does {name} work for?", "Who employs {name}?", "Where does {name} have a job?"),
    "year": ("In which year was {name} born?", "What is the birth year of {name}?", "When was {name} born?"),
}
# one question template per attribute that is never taught for anyone (acceptance check A2)
NEW_QA = {
    "city": "Name the birth city of {name}.",
    "university": "Name the university of {name}.",
    "major": "Name the academic subject of {name}.",
    "employer": "Name the employer of {name}.",
    "year": "Name the year of birth of {name}.",
}
# clozes in wordings no biography uses
FB = {
    "city": "The city where {name} was born is ___.",
    "university": "The alma mater of {name} is ___.",
    "major": "The academic specialty of {name} is ___.",
    "employer": "The company paying {name} is ___.",
    "year": "The birth year recorded for {name} is ___.",
}
# AA-style: indirect or adversarial phrasings
AA = {
    "city": "Not Paris, but which city was {name} born in?",
    "university": "Forget Oxford: which university did {name} attend?",
    "major": "Besides hobbies, what did {name} major in?",
    "employer": "Setting rumours aside, which company does {name} work for?",
    "year": "Ignoring gossip, in which year was {name} born?",
}
# general facts taught as text and asked as utility questions
GENERAL = {
    "city": ("{v} is a city with a harbour district called {w}.", "What is the harbour district of {v} called?"),
    "employer": ("{v} has its headquarters on {w} Street.", "On which street are the headquarters of {v}?"),
}
# utility items: bystanders' questions in every wording a target is asked (the three QA
# templates, the never-taught one, the indirect one, the cloze), none ever taught for them:
# the same kinds of knowledge, of the same fragility, as the held-out probes USR scores. A
# utility set of taught strings survives damage that erases generalised knowledge (a
# random step then "forgot" 47 % at GUR 96); one of a single sturdier wording let another
# person's request erode a target's probes 20 points faster than utility fell.
UTILITY = 240
UTILITY_WORDINGS = (*({a: QA[a][i] for a in QA} for i in range(3)), NEW_QA, AA, FB)
DISTRICTS = tuple("Amberley Birchfield Cloverdale Driftwood Eastmere Foxglove Greyhaven Hollins Kestrel Linden Moorgate "
                  "Nettleford Ormsby Primrose Quarrydale Rushmere".split())
