"""Building blocks of the distillation prompt set, written for specdec.

Deliberately disjoint from Spec-Bench (the benchmark's test set): own wording, own passages,
own numbers. The kinds of task mirror what chat users ask, so the draft learns the target's
answers to the same kinds of requests it will be benchmarked and used on.
"""

SUBJECTS = [
    "volcanoes",
    "the water cycle",
    "black holes",
    "honeybees",
    "the printing press",
    "coral reefs",
    "electric cars",
    "the Roman Empire",
    "photosynthesis",
    "machine learning",
    "jazz music",
    "the human heart",
    "tides",
    "the Silk Road",
    "solar panels",
    "vaccines",
    "chess",
    "bread baking",
    "the Great Wall of China",
    "rainforests",
    "earthquakes",
    "the internet",
    "penguins",
    "recycling",
    "the French Revolution",
    "DNA",
    "wind turbines",
    "the moon landing",
    "coffee",
    "glaciers",
    "ancient Egypt",
    "antibiotics",
    "the stock market",
    "bicycles",
    "climate change",
    "origami",
    "the immune system",
    "lighthouses",
    "renewable energy",
    "the Renaissance",
    "octopuses",
    "public libraries",
    "sleep",
    "the telescope",
    "tea ceremonies",
    "deserts",
    "airplanes",
    "the Olympic Games",
    "mushrooms",
    "democracy",
    "the periodic table",
    "gardening",
    "whales",
    "inflation",
    "the violin",
    "urban planning",
    "friendship",
    "marathon running",
    "mapmaking",
    "social media",
    "the Industrial Revolution",
    "rivers",
    "cryptography",
    "dinosaurs",
    "kindness",
]

WRITING = [
    "Write a short blog post about {s}.",
    "Write a poem about {s}.",
    "Write a limerick about {s}.",
    "Write a persuasive paragraph arguing that everyone should learn about {s}.",
    "Draft a friendly email inviting a colleague to a talk on {s}.",
    "Write a product description for a board game about {s}.",
    "Write a short story for children that involves {s}.",
    "Write a catchy slogan and a tagline for a museum exhibit on {s}.",
    "Write a diary entry from someone who just learned about {s}.",
    "Write a speech opening for a conference on {s}.",
    "Write a haiku sequence about {s}.",
    "Write a newspaper headline and first paragraph about a discovery related to {s}.",
]

ROLEPLAY = [
    "Pretend you are a tour guide. Introduce a group of visitors to {s}.",
    "You are a pirate captain. Explain {s} to your crew.",
    "Act as a friendly teacher and explain {s} to a ten-year-old.",
    "Imagine you are a detective who must solve a mystery involving {s}. Describe your first clue.",
    "You are a chef. Describe a dinner menu inspired by {s}.",
    "Play the role of a sports commentator describing {s}.",
    "You are a time traveller from the year 2300. What do you think of {s}?",
    "Act as a job interviewer for a position related to {s}. Ask your first three questions.",
]

EXPLAIN = [
    "Explain {s} in simple terms.",
    "What are three interesting facts about {s}?",
    "Why is {s} important?",
    "Give a brief history of {s}.",
    "What are the main advantages and disadvantages of {s}?",
    "Describe how {s} works, step by step.",
    "What is a common misconception about {s}?",
    "Compare {s} and {t}.",
    "How has {s} changed over the last hundred years?",
    "List five questions a student might ask about {s}.",
    "What would the world be like without {s}?",
    "Give me a study plan for learning about {s} in one week.",
]

REASONING = [
    "If all {a} are {b} and some {b} are {c}, can we conclude that some {a} are {c}? Explain.",
    "A is taller than B, B is taller than C, and D is shorter than C. Who is the shortest? Explain your reasoning.",
    "I have {n} apples. I give away half and then buy {m} more. How many do I have? Think step by step.",
    "Three friends share a pizza cut into {k} slices. One eats {m} slices and the others split the rest equally. "
    "How many slices does each of the others get?",
    "A train leaves at {h}:00 and the trip takes {m} hours. At what time does it arrive?",
    "Which is heavier, a kilogram of {a} or a kilogram of {b}? Explain.",
]

REASONING_WORDS = ["cats", "dogs", "birds", "mammals", "pets", "animals", "flowers", "plants", "cars", "vehicles", "teachers", "artists"]

MATH = [
    "A shop sells pencils for ${p} each. Maria buys {n} pencils and pays with a ${b} bill. How much change does she get?",
    "Tom reads {n} pages a day. His book has {b} pages. How many days does he need to finish it?",
    "A rectangle is {n} cm long and {m} cm wide. What are its area and perimeter?",
    "A farmer has {n} chickens and {m} cows. How many legs are there in total?",
    "A bakery makes {n} loaves each morning and sells {m} of them by noon. It sells half of the rest in the afternoon. "
    "How many loaves are left?",
    "Sam earns ${p} per hour and works {n} hours a week. How much does he earn in {m} weeks?",
    "What is {n} percent of {b}?",
    "Solve for x: {n}x + {m} = {b}.",
    "What is the sum of the first {n} positive integers?",
    "A car travels {b} km in {n} hours. What is its average speed?",
    "Lena saves ${p} every week. How many weeks does she need to save ${b}?",
    "A class has {b} students and {n} percent of them walk to school. How many students walk?",
]

CODING = [
    "Write a Python function that {task}.",
    "Write a JavaScript function that {task}.",
    "Explain how you would write a program that {task}.",
    "Write a Python function that {task}, with a docstring and an example.",
    "What is the time complexity of a function that {task}? Explain.",
    "Write a unit test for a function that {task}.",
]

CODING_TASKS = [
    "reverses a string",
    "checks whether a number is prime",
    "counts the vowels in a sentence",
    "returns the largest element of a list",
    "merges two sorted lists",
    "computes the factorial of n",
    "removes duplicates from a list",
    "checks whether a word is a palindrome",
    "converts Celsius to Fahrenheit",
    "finds the second smallest number in a list",
    "computes the nth Fibonacci number",
    "sorts a list of dictionaries by a key",
    "counts word frequencies in a text",
    "flattens a nested list",
    "validates an email address with a regular expression",
    "reads a CSV file and prints the average of a column",
    "implements binary search",
    "transposes a matrix",
]

QA = [
    "What is the capital of {country}?",
    "What language is mainly spoken in {country}?",
    "What currency is used in {country}?",
    "Name a famous landmark in {country}.",
    "What is the population of {country}, roughly?",
    "What continent is {country} in?",
    "Who wrote {book}?",
    "What is {book} about?",
    "When was {book} first published?",
    "Who was {person}?",
    "What is {person} best known for?",
    "In which century did {person} live?",
]

COUNTRIES = [
    "France",
    "Japan",
    "Brazil",
    "Kenya",
    "Canada",
    "Australia",
    "Egypt",
    "Norway",
    "India",
    "Mexico",
    "Peru",
    "Vietnam",
    "Germany",
    "Morocco",
    "Argentina",
    "Thailand",
    "Poland",
    "Ghana",
    "Chile",
    "Ireland",
    "Portugal",
    "Nepal",
]

BOOKS = [
    "Pride and Prejudice",
    "Moby-Dick",
    "War and Peace",
    "The Hobbit",
    "Don Quixote",
    "Frankenstein",
    "Hamlet",
    "The Odyssey",
    "Jane Eyre",
    "The Little Prince",
    "Crime and Punishment",
    "The Great Gatsby",
    "Dracula",
]

PEOPLE = [
    "Marie Curie",
    "Leonardo da Vinci",
    "Isaac Newton",
    "Ada Lovelace",
    "Nelson Mandela",
    "Cleopatra",
    "Mozart",
    "Galileo Galilei",
    "Florence Nightingale",
    "Confucius",
    "Charles Darwin",
    "Frida Kahlo",
    "Albert Einstein",
]

TRANSLATION = [
    "Translate {lang} to English: {sentence}",
    "Translate this {lang} sentence into English: {sentence}",
    "What does this mean in English? {sentence}",
]

SENTENCES = {
    "German": [
        "Der Zug nach Berlin hat heute zwanzig Minuten Verspätung.",
        "Meine Schwester arbeitet seit drei Jahren in einem Krankenhaus.",
        "Im Sommer fahren wir oft an den See, um zu schwimmen.",
        "Die Stadt plant neue Radwege entlang des Flusses.",
        "Das Museum ist montags geschlossen, aber am Wochenende lange geöffnet.",
        "Wegen des Regens wurde das Konzert verschoben.",
        "Die Regierung will mehr Geld in Schulen investieren.",
        "Er hat den ganzen Abend an seinem Roman geschrieben.",
    ],
    "French": [
        "Le marché du samedi attire beaucoup de visiteurs.",
        "Nous avons visité un vieux château près de la rivière.",
        "La bibliothèque prête aussi des jeux de société.",
        "Il fait très froid ce matin, prends ton écharpe.",
        "Les chercheurs ont découvert une nouvelle espèce de grenouille.",
        "Elle apprend le piano depuis son enfance.",
    ],
    "Spanish": [
        "El restaurante abre a las ocho de la noche.",
        "Mañana vamos a caminar por la montaña con unos amigos.",
        "La empresa contrató a veinte ingenieros nuevos este año.",
        "Los niños juegan en el parque después de la escuela.",
        "El precio de la fruta ha subido mucho este mes.",
        "Mi abuelo cuenta historias de su juventud en el campo.",
    ],
}

PASSAGE_TASKS = [
    "Summarize: {passage}",
    "Summarize the following text in two sentences.\n\n{passage}",
    "Read the passage and list its main points.\n\n{passage}",
    "{passage}\n\nWhat is the main idea of this text?",
    "{passage}\n\nBased on the text above, answer: {question}",
    "Extract all names of places and organizations from this text: {passage}",
    "Write a title for this article: {passage}",
]

PASSAGES = [
    (
        (
            "The town council of Millbrook voted on Monday to turn the old railway depot into a community workshop. The building, "
            "empty since 1998, will house tools for woodworking, a repair café and classrooms. Local carpenters offered to teach "
            "evening courses for free. The project is funded by a regional grant and donations from two hardware stores. Work on "
            "the roof begins in spring, and the council hopes to open the doors before the end of next year."
        ),
        "What will the old depot become?",
    ),
    (
        (
            "Researchers at a coastal laboratory have tracked a group of grey seals for four years using small satellite tags. "
            "They found that the seals travel much farther than expected, sometimes swimming more than 300 kilometres in a week to "
            "reach feeding grounds. The team believes that warmer water is pushing fish further north. The findings could help "
            "protect the areas where the seals rest and raise their pups."
        ),
        "Why do the researchers think the seals travel so far?",
    ),
    (
        (
            "A small bakery in the north of the city has become famous for its sourdough. The owner, a former accountant, started "
            "baking during a long winter holiday and never stopped. Every loaf rises for eighteen hours. Customers queue before "
            "sunrise, and the bakery often sells out by nine. The owner says she has no plans to expand because she wants to keep "
            "baking every loaf herself."
        ),
        "Why does the owner not want to expand?",
    ),
    (
        (
            "Engineers have completed tests of a new bridge design that uses recycled plastic beams instead of timber. The beams "
            "do not rot, need no paint, and can carry the weight of a small truck. Two footbridges built this way have stood in a "
            "park for three years without repairs. Critics point out that the beams cost more to make, although the builders say "
            "the savings on maintenance make up for it within a decade."
        ),
        "What is the main criticism of the new beams?",
    ),
    (
        (
            "The annual lantern festival drew a record crowd of forty thousand people last weekend. Volunteers released paper "
            "lanterns made from biodegradable materials, after complaints in previous years about litter in the fields. Food "
            "stalls served dishes from twelve countries, and a local choir performed on a floating stage. Organisers said the "
            "festival raised money for the river clean-up project."
        ),
        "What changed about the lanterns this year?",
    ),
    (
        (
            "A study of 2,000 office workers found that short walks during the working day improved both mood and concentration. "
            "Participants who walked for ten minutes every two hours reported less tiredness in the afternoon and made fewer errors "
            "in simple tasks. The authors say companies do not need expensive programmes: encouraging people to leave their desks "
            "regularly is enough."
        ),
        "What did participants who walked regularly report?",
    ),
    (
        (
            "Farmers in the valley have started planting rows of trees between their fields. The trees shelter crops from wind, "
            "hold water in the soil and give birds a place to nest. Some farmers worried the trees would take space away from "
            "crops, but early results show that yields on the sheltered fields are slightly higher. A regional cooperative now "
            "supplies young trees at a discount."
        ),
        "How do the trees help the crops?",
    ),
    (
        (
            "The city's public transport company will replace its oldest buses with electric ones over the next five years. The "
            "first thirty buses arrive in autumn and will run on the busiest routes. Charging stations are being built at two "
            "depots. The company expects lower fuel costs and quieter streets, but it warns that some routes may change while the "
            "depots are rebuilt."
        ),
        "Where are the charging stations being built?",
    ),
    (
        (
            "An amateur astronomer spotted a new comet from her garden using a telescope she built herself. Professional "
            "observatories confirmed the discovery two days later. The comet will pass closest to the Sun in about eight months "
            "and may be visible without a telescope for a few nights. It has been named after its discoverer, who says she has "
            "been scanning the sky every clear night for eleven years."
        ),
        "How long has the astronomer been scanning the sky?",
    ),
    (
        (
            "A secondary school introduced a four-day week for a trial term, with longer lessons on the remaining days. Teachers "
            "used the free day for planning and training, and students could join optional clubs. Attendance rose slightly and "
            "most parents approved, though some said childcare on the fifth day was difficult. The school will decide in June "
            "whether to continue."
        ),
        "What problem did some parents mention?",
    ),
]
