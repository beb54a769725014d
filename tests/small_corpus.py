"""A tiny real corpus shared by the tests: eight one-sentence encyclopaedia passages."""

PASSAGES = [
    {"id": "paris", "title": "Paris", "text": "Paris is the capital and most populous city of France."},
    {"id": "berlin", "title": "Berlin", "text": "Berlin is the capital and largest city of Germany."},
    {"id": "mona", "title": "Mona Lisa", "text": "The Mona Lisa is a portrait painted by Leonardo da Vinci."},
    {"id": "banana", "title": "Banana", "text": "A banana is an elongated, edible fruit produced by plants."},
    {"id": "jupiter", "title": "Jupiter", "text": "Jupiter is the largest planet in the Solar System."},
    {"id": "france", "title": "France", "text": "France is a country in Western Europe; its capital is Paris."},
    {"id": "rome", "title": "Rome", "text": "Rome is the capital city of Italy."},
    {"id": "nile", "title": "Nile", "text": "The Nile is a major river in northeastern Africa."},
]
