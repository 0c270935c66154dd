"""The operative sentence in a web service's terms of service: numbered lists under Markdown headings, the
user's account in place of "this Agreement", no cap on liability. Short clauses written for these tests;
none is taken from a dev document or a published agreement. docs/REVIEW.md, "The operative sentence of
each kind".
"""

from __future__ import annotations

from tests.agents.cited import best_sentence as _best


def test_the_right_to_suspend_or_terminate_an_account_is_the_termination_clause():
    text = ("## Closing Accounts\n\n"
            "1. You may close your workspace from its settings page.\n"
            "2. The Operator has the right to suspend or terminate your workspace for any reason at any time. "
            "Closed workspaces are deleted after 60 days.\n")
    assert _best(text, "termination").startswith("The Operator has the right to suspend or terminate")


def test_paying_in_advance_is_the_payment_duty_and_the_consequence_of_not_paying_is_not():
    text = ("## Billing\n\n"
            "1. Each workspace has a free tier. To use more storage you must keep paying in advance for the "
            "extra storage. If you fail to pay for the extra storage, the workspace will be locked until "
            "payment is received.\n"
            "2. Prices exclude sales taxes, and you are responsible for those taxes.\n")
    assert _best(text, "payment").startswith("To use more storage you must keep paying in advance")


def test_without_a_cap_the_exclusion_of_all_damages_is_cited_not_a_narrower_one():
    text = ("## Plugins\n\n"
            "1. The Operator will not be liable for any damages or losses caused by third-party plugins.\n\n"
            "## Other Terms\n\n"
            "1. The service is provided as is.\n"
            "2. The Operator will not be liable for any direct, indirect, incidental, special or consequential "
            "damages, including lost profits, arising from your use of the service.\n")
    assert _best(text, "liability_cap").startswith("The Operator will not be liable for any direct, indirect")


def test_with_a_cap_the_waiver_of_consequential_damages_is_still_not_the_cap():
    text = ("## Liability\n\n"
            "1. Neither party will be liable for any indirect, incidental or consequential damages.\n"
            "2. Each party's total liability will not exceed the fees paid in the 12 months before the claim.\n")
    assert _best(text, "liability_cap").startswith("Each party's total liability will not exceed")
