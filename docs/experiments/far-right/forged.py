"""What "fully right by this node's verifier" admits from a peer, per packaged family.

A bundle carries the question *and its answer key*, both the sender's. For 24 questions of each
family of the packaged task files (``swarmnode.train.tasks.TaskSource``, seed 0, round 0), this
node's verifier (``Scorer``) scores, in a peer response's trained form:

- spliced: the key with words spliced in (the two strings of ``benchmarks/peer_nearness.py``
  after it, "buy " before it): the highest score, and how many scored 1;
- forged: a key the sender set to the words themselves, answered with them: how many of the
  24 questions score it 1.

Run: ``PYTHONPATH=. python docs/experiments/far-right/forged.py``.
"""

from benchmarks.peer_nearness import INJECTED
from swarmnode.records import Question
from swarmnode.train.tasks import Scorer, TaskSource, load_task_file

QUESTIONS = 24


def main() -> None:
    families: dict = {}
    for name in (None, "laptop", "short"):
        families.update(load_task_file(name))
    scorer = Scorer(families)
    print(f"{'family':24} spliced: best, scored 1 | forged key: scored 1 (of {QUESTIONS})")
    for family in sorted(families):
        source = TaskSource({family: families[family]}, 0)
        spliced, forged_right = [], 0
        for q in source.sample(0, QUESTIONS):
            for text in (q.answer + INJECTED[0], q.answer + INJECTED[1], "buy " + q.answer):
                spliced.append(scorer.score(q, f"<answer>{text}</answer>") or 0.0)
            forged = Question(q.family, q.question, INJECTED[1].strip(), q.metadata, q.level)
            forged_right += scorer.score(forged, f"<answer>{forged.answer}</answer>") == 1.0
        print(f"{family:24} {max(spliced):.2f}, {sum(s == 1.0 for s in spliced):3d} of {len(spliced)}"
              f" | {forged_right:2d}")


if __name__ == "__main__":
    main()
