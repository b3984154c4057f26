"""Black-box: scopes and prefix allowlists on every router route (API §1.3)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.http.live import error_of, ok
from tests.support.server import ServerProcess

KEYS = "full, adm:a, rd:r, dl:d, wr:w, ten::t1., ten2::t1.|r1."


def key(k: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {k}"}


FULL, ADM, RD, DL, WR, TEN, TEN2 = (
    key(k) for k in ("full", "adm", "rd", "dl", "wr", "ten", "ten2")
)


@pytest.fixture(scope="module")
def srv() -> Iterator[ServerProcess]:
    s = ServerProcess(env={"SEGLOG_API_KEYS": KEYS})
    s.start()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def c(srv: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=srv.url, timeout=15) as client:
        yield client


@pytest.fixture
def u() -> str:
    return uuid.uuid4().hex[:8]


def body(source: str, dest: str) -> dict[str, Any]:
    return {"source": source, "dest": dest}


def exists(c: httpx.Client, name: str) -> bool:
    r = c.get(f"/v0/routers/{name}", headers=FULL)
    return r.status_code == 200


def test_put_scopes_and_allowlists(c: httpx.Client, u: str) -> None:
    name, s, d = f"t1.r{u}", f"t1.s{u}", f"t1.d{u}"
    error_of(c.put(f"/v0/routers/{name}", json=body(s, d)), 401, "unauthorized")
    for k in (RD, DL, WR):
        error_of(c.put(f"/v0/routers/{name}", json=body(s, d), headers=k), 403, "forbidden")
    error_of(
        c.put(f"/v0/routers/x.r{u}", json=body(s, d), headers=TEN),
        403,
        "forbidden",
        detail={"router": f"x.r{u}"},
    )
    error_of(
        c.put(f"/v0/routers/{name}", json=body(f"x.s{u}", d), headers=TEN),
        403,
        "forbidden",
        detail={"topic": f"x.s{u}"},
    )
    error_of(
        c.put(f"/v0/routers/{name}", json=body(s, f"x.d{u}"), headers=TEN),
        403,
        "forbidden",
        detail={"topic": f"x.d{u}"},
    )
    assert not exists(c, name) and not exists(c, f"x.r{u}")
    assert c.get(f"/v0/topics/{s}", headers=FULL).status_code == 404
    ok(c.put(f"/v0/routers/{name}", json=body(s, d), headers=TEN), 201)
    ok(c.put(f"/v0/routers/{name}", json=body(s, d), headers=ADM), 200)


def test_get_scopes_and_allowlists(c: httpx.Client, u: str) -> None:
    mine, mixed = f"t1.g{u}", f"t1.m{u}"
    ok(c.put(f"/v0/routers/{mine}", json=body(f"t1.s{u}", f"t1.d{u}"), headers=FULL), 201)
    ok(c.put(f"/v0/routers/{mixed}", json=body(f"o.s{u}", f"t1.e{u}"), headers=FULL), 201)
    error_of(c.get(f"/v0/routers/{mine}"), 401, "unauthorized")
    for k in (ADM, DL, WR):
        error_of(c.get(f"/v0/routers/{mine}", headers=k), 403, "forbidden")
    ok(c.get(f"/v0/routers/{mine}", headers=RD))
    ok(c.get(f"/v0/routers/{mine}", headers=TEN))
    error_of(
        c.get(f"/v0/routers/{mixed}", headers=TEN),
        403,
        "forbidden",
        detail={"topic": f"o.s{u}"},
    )
    error_of(c.get(f"/v0/routers/x{u}", headers=TEN), 403, "forbidden", detail={"router": f"x{u}"})
    error_of(c.get(f"/v0/routers/t1.nope{u}", headers=TEN), 404, "router_not_found")


def test_delete_scopes_and_allowlists(c: httpx.Client, u: str) -> None:
    mine, mixed = f"t1.x{u}", f"t1.y{u}"
    ok(c.put(f"/v0/routers/{mine}", json=body(f"t1.s{u}", f"t1.d{u}"), headers=FULL), 201)
    ok(c.put(f"/v0/routers/{mixed}", json=body(f"t1.t{u}", f"o.d{u}"), headers=FULL), 201)
    for k in (ADM, RD, WR):
        error_of(c.delete(f"/v0/routers/{mine}", headers=k), 403, "forbidden")
    error_of(
        c.delete(f"/v0/routers/{mixed}", headers=TEN),
        403,
        "forbidden",
        detail={"topic": f"o.d{u}"},
    )
    error_of(c.delete(f"/v0/routers/z{u}", headers=TEN), 403, "forbidden")
    assert exists(c, mine) and exists(c, mixed)
    assert ok(c.delete(f"/v0/routers/{mine}", headers=TEN))["deleted"] is True
    assert ok(c.delete(f"/v0/routers/{mixed}", headers=DL))["deleted"] is True
    assert ok(c.delete(f"/v0/routers/t1.absent{u}", headers=TEN))["deleted"] is False


def test_other_methods_need_admin_first(c: httpx.Client, u: str) -> None:
    for k in (RD, DL, WR):
        error_of(c.patch(f"/v0/routers/t1.{u}", headers=k), 403, "forbidden")
    error_of(c.patch(f"/v0/routers/x.{u}", headers=TEN), 403, "forbidden")
    error_of(c.post(f"/v0/routers/t1.{u}", json={}, headers=TEN), 405, "method_not_allowed")
    error_of(c.patch(f"/v0/routers/x.{u}", headers=ADM), 405, "method_not_allowed")


def test_list_shows_only_fully_allowed_routers(c: httpx.Client, u: str) -> None:
    specs = {
        f"t1.a{u}": (f"t1.s{u}", f"t1.d{u}"),
        f"t1.b{u}": (f"o.s{u}", f"t1.e{u}"),
        f"r1.c{u}": (f"t1.s{u}", f"t1.f{u}"),
        f"x.d{u}": (f"t1.s{u}", f"t1.g{u}"),
    }
    for name, (s, d) in specs.items():
        ok(c.put(f"/v0/routers/{name}", json=body(s, d), headers=FULL), 201)
    error_of(c.get("/v0/routers"), 401, "unauthorized")
    for k in (ADM, DL, WR):
        error_of(c.get("/v0/routers", headers=k), 403, "forbidden")

    def listed(k: dict[str, str]) -> set[str]:
        rows = ok(c.get("/v0/routers", params={"source": f"t1.s{u}"}, headers=k))["routers"]
        rows += ok(c.get("/v0/routers", params={"source": f"o.s{u}"}, headers=k))["routers"]
        return {r["router"] for r in rows}

    assert listed(RD) == set(specs)
    assert listed(TEN) == {f"t1.a{u}"}
    assert listed(TEN2) == {f"t1.a{u}", f"r1.c{u}"}
    # a page is filled with routers the key may see, past hidden ones
    page = ok(c.get("/v0/routers", params={"page_size": 1, "prefix": "t1."}, headers=TEN))
    assert len(page["routers"]) == 1
    row = page["routers"][0]
    assert all(row[k].startswith("t1.") for k in ("router", "source", "dest"))
