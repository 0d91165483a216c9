# -*- coding: utf-8 -*-
"""gcp_image_rollout's requests: a transient answer (429/503, any 5xx or a broken connection for a GET) is tried
again; a POST the API may have acted on (500) is not; the last answer is what the module reports."""
from __future__ import annotations

import pytest

from ansible_collections.moe_infra.deepep.plugins.modules import gcp_image_rollout as module


class Response(object):
    def __init__(self, status):
        self.status_code = status


class ConnectionError(Exception):  # named as requests' own: the module tells it by name  # noqa: A001
    pass


class Session(object):
    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = 0

    def _next(self, url, **kwargs):
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return Response(answer)

    full_get = full_post = _next


class Module(object):
    def __init__(self, retries):
        self.params = {"request_retries": retries}


def compute(answers, retries=3):
    api = module.Compute.__new__(module.Compute)
    api.module, api.session = Module(retries), Session(answers)
    return api


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    monkeypatch.setattr(module.time, "sleep", lambda seconds: None)


@pytest.mark.parametrize("method, answers, status, calls", [
    ("GET", [503, 502, 200], 200, 3),
    ("GET", [ConnectionError("reset"), 200], 200, 2),
    ("POST", [429, 200], 200, 2),
    ("POST", [500], 500, 1),           # it may have acted: not sent twice
    ("GET", [503, 503, 503, 503], 503, 4),  # the last answer after 3 retries
    ("GET", [404], 404, 1),
])
def test_transient_answers_are_tried_again(method, answers, status, calls):
    api = compute(answers)
    assert api.send(method, "https://compute.googleapis.com/x").status_code == status
    assert api.session.calls == calls


def test_no_retries_when_set_to_zero():
    api = compute([503, 200], retries=0)
    assert api.send("GET", "u").status_code == 503 and api.session.calls == 1
