"""Accounts over HTTP: who the API's token is (/api/me), the pages' login and logout, a student's leaderboard
opt-in."""

import secrets
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from grader.i18n import LANGUAGES, _
from grader.server.accounts import authenticate, set_leaderboard
from grader.server.routes.web import ApiUser, Db, PageUser, check_csrf, render

router = APIRouter()


@router.get("/api/me")
def me(user: ApiUser) -> dict:
    return {"student_id": user.student_id, "name": user.name, "role": user.role}


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request) -> HTMLResponse:
    return render(request, "login.html.j2", error="")


@router.post("/login")
def login(request: Request, db: Db, token: Annotated[str, Form()], csrf: Annotated[str, Form()]) -> Response:
    check_csrf(request, csrf)
    user = authenticate(db, token.strip())
    if user is None:
        return render(request, "login.html.j2", error=_("wrong token"))
    lang = request.session.get("lang")
    request.session.clear()  # a fresh session (and CSRF token) on login; the language chosen stays
    request.session.update(token_hash=user.token_hash, csrf=secrets.token_urlsafe(24))
    if lang in LANGUAGES:
        request.session["lang"] = lang
    return RedirectResponse("/instructor" if user.role == "instructor" else "/", status_code=303)


@router.post("/logout")
def logout(request: Request, csrf: Annotated[str, Form()]) -> Response:
    check_csrf(request, csrf)
    request.session.clear()
    return RedirectResponse("/login", status_code=303)


@router.post("/leaderboard/opt")
def opt(request: Request, db: Db, csrf: Annotated[str, Form()], user: PageUser,
        on: Annotated[str, Form()] = "0") -> Response:
    check_csrf(request, csrf)
    set_leaderboard(db, user, on == "1")
    return RedirectResponse("/", status_code=303)
