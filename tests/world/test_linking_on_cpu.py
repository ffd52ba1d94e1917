from data_gen.world.linking import Form, Linker, tokens


def test_tokens_keep_hyphenated_and_dotted_words_whole():
    assert tokens("Guinea-Bissau borders Guinea; U.S. state") == ["Guinea-Bissau", "borders", "Guinea", ";", "U.S", ".", "state"]


def test_longest_match_wins_and_consumes_its_tokens():
    linker = Linker([Form("New York", "ny_state", True), Form("New York City", "nyc", True), Form("York", "york", True)])
    assert linker.mentions("He moved to New York City, not York.") == ["nyc", "york"]
    assert linker.mentions("Upstate New York") == ["ny_state"]


def test_word_boundaries_no_match_inside_a_longer_word():
    linker = Linker([Form("Guinea", "gin", True), Form("Oman", "omn", True)])
    assert linker.mentions("Guinea-Bissau and Romania and Omani ports") == []
    assert linker.mentions("Guinea and Oman.") == ["gin", "omn"]


def test_self_and_first_mention_order_and_dedup():
    linker = Linker([Form("France", "France", True), Form("Paris", "Paris", True), Form("Spain", "Spain", True)])
    assert linker.mentions("France: Paris, Spain, Paris, France.", self_id="France") == ["Paris", "Spain"]


def test_ambiguous_form_links_nothing_but_label_beats_alias():
    linker = Linker(
        [
            Form("Georgia", "Georgia", True),
            Form("Georgia", "Georgia_(us_state)", True),
            Form("Holland", "Netherlands", False),
            Form("Holland", "Holland_Michigan", True),
            Form("Turkiye", "Turkey", False),
        ]
    )
    assert linker.mentions("Georgia, Holland and Turkiye") == ["Holland_Michigan", "Turkey"]


def test_short_and_letterless_forms_are_skipped():
    linker = Linker([Form("US", "usa", True), Form("1914", "ww1", True), Form("Ur", "ur", True)])
    assert len(linker) == 0
    assert linker.mentions("US troops in 1914 near Ur") == []


def test_common_nouns_match_either_initial_case_proper_names_only_as_written():
    linker = Linker([Form("cat", "cat", True, common=True), Form("Turkey", "Turkey", True)])
    assert linker.mentions("Cats aside, the cat sat. Cat food.") == ["cat"]
    assert linker.mentions("roast turkey") == []
    assert linker.mentions("flights to Turkey") == ["Turkey"]
