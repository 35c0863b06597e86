from swarmnode.records import Question
from swarmnode.train.tasks import (
    ANSWER_OPEN,
    Scorer,
    TaskSource,
    build_prompt,
    extract_answer,
    full_response,
    load_task_file,
)

PAPER_FAMILIES = {"base_conversion", "basic_arithmetic", "arc_1d", "bf", "propositional_logic",
                  "fraction_simplification", "decimal_arithmetic", "calendar_arithmetic", "binary_matrix"}


def test_packaged_task_file_has_the_papers_nine_families():
    assert set(load_task_file(None)) == PAPER_FAMILIES


def test_laptop_names_the_packaged_easy_set_and_its_questions_score():
    fams = load_task_file("laptop")
    assert set(fams) == {"calendar_arithmetic", "chain_sum"}
    assert fams["chain_sum"]["config"]["max_digits"] == 1
    scorer = Scorer(fams)
    for q in TaskSource(fams, 0).sample(0, 8):
        assert scorer.score(q, f"<answer>{q.answer}</answer>") == 1.0, q


def test_extract_answer_takes_the_last_complete_tag():
    assert extract_answer("<answer>1</answer> then <answer> 42 </answer>") == "42"
    assert extract_answer("no tags here") is None
    assert extract_answer("<answer>17\nbecause reasons") == "17"   # cut off by the token limit
    assert extract_answer("<answer>") is None


def test_question_stream_is_deterministic_and_per_seed():
    fams = load_task_file(None)
    a, b = TaskSource(fams, 1), TaskSource(fams, 1)
    assert [q.question for q in a.sample(5, 8)] == [q.question for q in b.sample(5, 8)]
    assert [q.question for q in a.sample(5, 8)] != [q.question for q in TaskSource(fams, 2).sample(5, 8)]
    assert [q.question for q in a.sample(5, 8)] != [q.question for q in a.sample(6, 8)]


def test_reward_is_reasoning_gyms_score_on_real_entries():
    fams = load_task_file(None)
    scorer = Scorer(fams)
    for q in TaskSource(fams, 3).sample(0, 20):
        # propositional_logic has no single key: any valid conclusion scores; it keeps an example.
        key = q.metadata.get("example_answer", q.answer) if q.answer == "None" else q.answer
        assert scorer.score(q, f"<answer>{key}</answer>") == 1.0, q
        assert scorer.score(q, "I do not know") == 0.0


def test_unknown_family_and_raising_verifier_are_unverifiable():
    scorer = Scorer()
    assert scorer.score(Question("no_such_family", "q", "a"), "<answer>a</answer>") is None
    broken = Question("basic_arithmetic", "Calculate 1 + 1.", "2", {"difficulty": object()})
    assert scorer.score(broken, "<answer>2</answer>") in (1.0, None)


def test_prompt_uses_chat_template_and_prefills_the_tag(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = build_prompt(tok, "Calculate 1 + 1.", True)
    assert "<|im_start|>user\nCalculate 1 + 1." in text and text.endswith("assistant\n" + ANSWER_OPEN)
    assert not build_prompt(tok, "x", False).endswith(ANSWER_OPEN)
    assert full_response("2</answer>", True) == "<answer>2</answer>"


def test_a_base_model_without_chat_template_gets_its_bos_and_a_worked_example(tmp_path):
    from transformers import AutoTokenizer

    from tinymodel import build_tiny_model

    tok = AutoTokenizer.from_pretrained(build_tiny_model(tmp_path, arch="gemma3"))
    assert not tok.chat_template and tok("x")["input_ids"][0] == tok.bos_token_id
    text = build_prompt(tok, "Calculate 1 + 1.", True)
    assert text.startswith(tok.bos_token) and text.count(tok.bos_token) == 1
    assert text.endswith("Question: Calculate 1 + 1.\nAnswer: " + ANSWER_OPEN)
    assert "<answer>5</answer>" in text  # the example closes its tag
    ids = tok(text, add_special_tokens=False)["input_ids"]  # as the sampler encodes it
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1
