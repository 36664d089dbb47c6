"""Declared preconditions of the BFCL multi-turn functions, stated over the live environment.

Each rule reads the few attributes it needs from the task's :class:`~.env.BfclEnv` (login
flags, the current directory's entries, door and brake state, balances, ...) and returns
the reason the environment would refuse the call, or ``None``. They are read straight off
the environment classes' documented behaviour; they never run the call (that is the
dry-run mode's job) and never copy state.

``RULES[function]`` is the tuple of rules of one function, checked in order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final

from .env import BfclEnv

__all__ = (
    "RULES",
    "Rule",
    "first_violation",
)

Rule = Callable[[BfclEnv, Mapping[str, Any]], "str | None"]
"""``(env, args) -> reason | None``."""

_BAD_NAME_CHARS: Final = '|/\\?%*:"><'
_DOORS: Final = frozenset({"driver", "passenger", "rear_left", "rear_right"})


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# -- file system -------------------------------------------------------------------------


def _fs(env: BfclEnv) -> Any:
    return env.get("GorillaFileSystem")


def _entries(env: BfclEnv) -> Mapping[str, Any]:
    return _fs(env)._current_dir.contents  # type: ignore[no-any-return]


def _is_dir(item: Any) -> bool:
    return type(item).__name__ == "Directory"


def _is_file(item: Any) -> bool:
    return type(item).__name__ == "File"


def _valid_name(key: str, label: str) -> Rule:
    def rule(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
        name = args.get(key)
        if isinstance(name, str) and any(c in name for c in _BAD_NAME_CHARS):
            return f"{label} {name!r} contains a character a file name cannot have"
        return None

    rule.__name__ = f"valid_{key}"
    return rule


def _new_entry(key: str) -> Rule:
    def rule(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
        name = args.get(key)
        if name in _entries(env):
            return f"'{name}' already exists in the current directory"
        return None

    rule.__name__ = f"{key}_is_new"
    return rule


def _file_here(*keys: str, optional: bool = False) -> Rule:
    def rule(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
        entries = _entries(env)
        for key in keys:
            name = args.get(key)
            if name is None and optional:
                continue
            item = entries.get(name) if isinstance(name, str) else None
            if not _is_file(item):
                what = "a directory" if _is_dir(item) else "not in the current directory"
                return f"file '{name}' is {what}"
        return None

    rule.__name__ = f"{'_'.join(keys)}_is_a_file_here"
    return rule


def _entry_here(key: str) -> Rule:
    def rule(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
        name = args.get(key)
        if not isinstance(name, str) or name not in _entries(env):
            return f"'{name}' is not in the current directory"
        return None

    rule.__name__ = f"{key}_exists_here"
    return rule


def _cd_target(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    folder = str(args.get("folder", "")).rstrip("/") or "/"
    fs = _fs(env)
    if folder not in {".", "..", "/"} and "/" in folder:
        return f"cd moves one folder level at a time; '{folder}' is a path"
    if folder == "..":
        return "already at the root directory" if fs._current_dir.parent is None else None
    if folder in {".", "/"}:
        return None
    if not _is_dir(fs._current_dir.contents.get(folder)):
        return f"folder '{folder}' is not in the current directory"
    return None


def _find_path(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    path = args.get("path", ".")
    if not isinstance(path, str) or path in (".", "/"):
        return None
    fs = _fs(env)
    node: Any = fs.root if path.startswith("/") else fs._current_dir
    for part in path.strip("/").split("/"):
        node = node.contents.get(part) if part != "." else node
        if not _is_dir(node):
            return f"path '{path}' does not exist"
    return None


def _no_path(key: str) -> Rule:
    def rule(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
        value = args.get(key)
        if isinstance(value, str) and "/" in value:
            return f"{key} '{value}' must be a name in the current directory, not a path"
        return None

    rule.__name__ = f"{key}_is_not_a_path"
    return rule


def _move_target(copying: bool) -> Rule:
    def rule(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
        entries = _entries(env)
        source, dest = args.get("source"), args.get("destination")
        if isinstance(dest, str) and dest in entries:
            target = entries[dest]
            if not _is_dir(target):
                return f"'{dest}' exists and is not a directory"
            if source in target.contents:
                return f"'{dest}' already contains '{source}'"
        return None

    rule.__name__ = "copy_target_is_free" if copying else "move_target_is_free"
    return rule


def _dir_empty(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    item: Any = _entries(env).get(str(args.get("dir_name")))
    if not _is_dir(item):
        return f"'{args.get('dir_name')}' is not a directory in the current directory"
    if item.contents:
        return f"directory '{args.get('dir_name')}' is not empty"
    return None


def _wc_mode(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    return None if args.get("mode", "l") in ("l", "w", "c") else "mode must be one of l, w, c"


# -- messages -----------------------------------------------------------------------------


def _msg(env: BfclEnv) -> Any:
    return env.get("MessageAPI")


def _msg_logged_in(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    return None if _msg(env).current_user else "no user is logged in to the message service"


def _known_user_name(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    return None if args.get("user") in _msg(env).user_map else f"no user named '{args.get('user')}'"


def _known_user_id(key: str) -> Rule:
    def rule(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
        return None if args.get(key) in _msg(env).user_map.values() else f"no user with id '{args.get(key)}'"

    rule.__name__ = f"{key}_is_a_user"
    return rule


def _has_message_to(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    rid = args.get("receiver_id")
    # The environment looks only at the first receiver of each inbox entry.
    if any(next(iter(m), None) == rid for m in _msg(env).inbox):
        return None
    return f"no message to '{rid}' to delete"


def _new_contact(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    return f"contact '{args.get('user_name')}' already exists" if args.get("user_name") in _msg(env).user_map else None


# -- posting -------------------------------------------------------------------------------


def _tw(env: BfclEnv) -> Any:
    return env.get("TwitterAPI")


def _tw_authenticated(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    return None if _tw(env).authenticated else "not authenticated with the posting service"


def _tw_credentials(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    tw = _tw(env)
    if args.get("username") == tw.username and args.get("password") == tw.password:
        return None
    return "username or password does not match the account"


def _tweet_exists(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    tid = args.get("tweet_id")
    return None if tid in _tw(env).tweets else f"no tweet with id {tid!r}"


def _not_following(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    name = args.get("username_to_follow")
    return f"already following '{name}'" if name in _tw(env).following_list else None


def _following(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    name = args.get("username_to_unfollow")
    return None if name in _tw(env).following_list else f"not following '{name}'"


# -- tickets -------------------------------------------------------------------------------


def _tk(env: BfclEnv) -> Any:
    return env.get("TicketAPI")


def _tk_logged_in(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    return None if _tk(env).current_user else "no user is logged in to the ticket system"


def _ticket(env: BfclEnv, args: Mapping[str, Any]) -> dict[str, Any] | None:
    tid = args.get("ticket_id")
    for t in _tk(env).ticket_queue:
        if t["id"] == tid:
            return t  # type: ignore[no-any-return]
    return None


def _ticket_exists(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    return None if _ticket(env, args) is not None else f"no ticket with id {args.get('ticket_id')!r}"


def _ticket_not(status: str) -> Rule:
    def rule(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
        t = _ticket(env, args)
        return f"ticket {args.get('ticket_id')!r} is already {status.lower()}" if t and t["status"] == status else None

    rule.__name__ = f"ticket_not_{status.lower()}"
    return rule


def _priority(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    p = _num(args.get("priority", 1))
    return None if p is not None and 1 <= p <= 5 else "priority must be between 1 and 5"


def _ticket_fields(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    updates = args.get("updates")
    bad = set(updates) - {"title", "description", "status", "priority"} if isinstance(updates, Mapping) else set()
    return f"tickets have no field(s) {', '.join(sorted(map(str, bad)))}" if bad else None


def _tk_credentials(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    return None if args.get("username") and args.get("password") else "username and password are required"


# -- trading -------------------------------------------------------------------------------


def _tb(env: BfclEnv) -> Any:
    return env.get("TradingBot")


def _tb_authenticated(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    return None if _tb(env).authenticated else "not logged in to the trading account"


def _stock_known(key: str) -> Rule:
    def rule(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
        sym = args.get(key)
        return None if sym in _tb(env).stocks else f"no stock with symbol {sym!r}"

    rule.__name__ = f"{key}_is_a_stock"
    return rule


def _order_exists(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    oid = args.get("order_id")
    return None if oid in _tb(env).orders else f"no order with id {oid!r}"


def _order_cancellable(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    order = _tb(env).orders.get(args.get("order_id"))
    return "the order is already completed" if order and order["status"] == "Completed" else None


def _order_values(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    price, amount = _num(args.get("price")), _num(args.get("amount"))
    if price is None or amount is None or price <= 0 or amount <= 0:
        return "price and amount must be positive"
    if str(args.get("order_type", "")).lower() == "buy" and price * int(amount) > _tb(env).account_info.get("balance", 0):
        return "insufficient funds for this buy order"
    return None


def _positive_amount(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    amount = _num(args.get("amount"))
    return None if amount is not None and amount > 0 else "the amount must be positive"


def _market_open(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    return None if _tb(env).market_status == "Open" else "the market is closed"


def _withdrawable(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    amount = _num(args.get("amount"))
    if amount is not None and amount > _tb(env).account_info["balance"]:
        return "insufficient funds for the withdrawal"
    return None


def _in_watchlist(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    return None if args.get("symbol") in _tb(env).watch_list else f"{args.get('symbol')!r} is not in the watchlist"


# -- travel --------------------------------------------------------------------------------


def _tr(env: BfclEnv) -> Any:
    return env.get("TravelAPI")


def _token_live(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    return "the access token has expired" if _tr(env).token_expires_in == 0 else None


def _token_initialised(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    return "no access token has been issued" if _tr(env).token_expires_in is None else None


def _token_matches(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    return None if args.get("access_token") == _tr(env).access_token else "invalid access token"


def _card_known(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    return None if args.get("card_id") in _tr(env).credit_card_list else f"no registered card {args.get('card_id')!r}"


def _card_new(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    return "this card is already registered" if args.get("card_number") in _tr(env).credit_card_list else None


def _booking_known(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    return None if args.get("booking_id") in _tr(env).booking_record else f"no booking {args.get('booking_id')!r}"


def _travel_class(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    if args.get("travel_class") in ("economy", "business", "first"):
        return None
    return "travel class must be economy, business or first"


def _airports(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    airports = _tr(env).list_all_airports()  # a constant list: reading it changes nothing
    for key in ("travel_from", "travel_to"):
        if args.get(key) not in airports:
            return f"{key} {args.get(key)!r} is not a known airport code"
    return None


def _travel_date(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    try:
        datetime.strptime(str(args.get("travel_date")), "%Y-%m-%d")
    except ValueError:
        return "travel_date must be YYYY-MM-DD"
    return None


def _card_over_budget(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    tr = _tr(env)
    card = tr.credit_card_list.get(args.get("card_id"), {})
    if "balance" not in card:
        return "the card has no balance on record"
    if tr.budget_limit is not None and card["balance"] < tr.budget_limit:
        return "the card balance is below the budget limit"
    return None


def _insurance_in_budget(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    tr, cost = _tr(env), _num(args.get("insurance_cost"))
    if tr.budget_limit is not None and cost is not None and tr.budget_limit < cost:
        return "the insurance cost exceeds the budget limit"
    return None


# -- vehicle -------------------------------------------------------------------------------


def _car(env: BfclEnv) -> Any:
    return env.get("VehicleControlAPI")


def _doors_locked(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    car = _car(env)
    if car.remainingUnlockedDoors > 0:
        open_doors = [d for d, s in car.doorStatus.items() if s == "unlocked"]
        return f"all doors must be locked before starting the engine ({', '.join(open_doors)} unlocked)"
    return None


def _brake_pressed(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    car = _car(env)
    if car.brakePedalStatus != "pressed" or car._brakePedalForce != 1000.0:
        return "the brake pedal must be fully pressed before starting the engine"
    return None


def _ignition(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    return None if args.get("ignitionMode") == "START" else "the engine can only be started with ignitionMode START"


def _fuel_fits(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    amount = _num(args.get("fuelAmount"))
    if amount is None or amount < 0:
        return "fuel amount cannot be negative"
    if _car(env).fuelLevel + amount > 50:
        return "the tank cannot hold that much fuel (50 gallons)"
    return None


def _doors_known(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    doors = args.get("door")
    bad = [d for d in doors if d not in _DOORS] if isinstance(doors, list) else []
    return f"unknown door(s): {', '.join(map(str, bad))}" if bad else None


def _one_of(key: str, allowed: tuple[Any, ...], default: Any = None) -> Rule:
    def rule(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
        value = args.get(key, default)
        return None if value in allowed else f"{key} must be one of {', '.join(map(str, allowed))}"

    rule.__name__ = f"{key}_is_allowed"
    return rule


def _between(key: str, low: float, high: float, default: Any = None) -> Rule:
    def rule(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
        value = _num(args.get(key, default))
        return None if value is not None and low <= value <= high else f"{key} must be between {low:g} and {high:g}"

    rule.__name__ = f"{key}_in_range"
    return rule


def _engine_running(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    return "start the engine first" if _car(env).engine_state == "stopped" else None


def _cruise_speed(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    if not args.get("activate"):
        return None
    speed = _num(args.get("speed"))
    if speed is None or speed < 0 or speed > 120 or speed % 5 != 0:
        return "cruise speed must be a multiple of 5 between 0 and 120"
    return None


# -- math ------------------------------------------------------------------------------------


def _nonzero(key: str) -> Rule:
    def rule(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
        return f"{key} cannot be zero" if args.get(key) == 0 else None

    rule.__name__ = f"{key}_nonzero"
    return rule


def _nonempty(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    return "the list of numbers is empty" if not args.get("numbers") else None


def _sqrt_domain(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    n = _num(args.get("number"))
    return "cannot take the square root of a negative number" if n is not None and n < 0 else None


def _log_domain(env: BfclEnv, args: Mapping[str, Any]) -> str | None:
    value, base = _num(args.get("value")), _num(args.get("base"))
    if value is not None and value <= 0:
        return "the logarithm needs a positive value"
    if base is not None and (base <= 0 or base == 1):
        return "the logarithm base must be positive and not 1"
    return None


_TOKEN: Final = (_token_live, _token_matches)

RULES: Final[Mapping[str, tuple[Rule, ...]]] = {
    # file system
    "cd": (_cd_target,),
    "mkdir": (_valid_name("dir_name", "directory name"), _new_entry("dir_name")),
    "touch": (_valid_name("file_name", "file name"), _new_entry("file_name")),
    "echo": (_valid_name("file_name", "file name"), _file_here("file_name", optional=True)),
    "cat": (_valid_name("file_name", "file name"), _file_here("file_name")),
    "find": (_find_path,),
    "wc": (_wc_mode, _file_here("file_name")),
    "sort": (_file_here("file_name"),),
    "grep": (_file_here("file_name"),),
    "tail": (_file_here("file_name"),),
    "diff": (_file_here("file_name1", "file_name2"),),
    "mv": (_entry_here("source"), _no_path("destination"), _move_target(False)),
    "cp": (_entry_here("source"), _no_path("destination"), _move_target(True)),
    "rm": (_entry_here("file_name"),),
    "rmdir": (_dir_empty,),
    # messages
    "get_user_id": (_known_user_name,),
    "message_login": (_known_user_id("user_id"),),
    "send_message": (_msg_logged_in, _known_user_id("receiver_id")),
    "delete_message": (_msg_logged_in, _has_message_to),
    "view_messages_sent": (_msg_logged_in,),
    "search_messages": (_msg_logged_in,),
    "get_message_stats": (_msg_logged_in,),
    "add_contact": (_new_contact,),
    # posting
    "authenticate_twitter": (_tw_credentials,),
    "post_tweet": (_tw_authenticated,),
    "retweet": (_tw_authenticated, _tweet_exists),
    "comment": (_tw_authenticated, _tweet_exists),
    "mention": (_tweet_exists,),
    "follow_user": (_tw_authenticated, _not_following),
    "list_all_following": (_tw_authenticated,),
    "unfollow_user": (_tw_authenticated, _following),
    "get_tweet": (_tweet_exists,),
    "get_tweet_comments": (_tweet_exists,),
    # tickets
    "create_ticket": (_tk_logged_in, _priority),
    "get_ticket": (_ticket_exists,),
    "close_ticket": (_ticket_exists, _ticket_not("Closed")),
    "resolve_ticket": (_ticket_exists, _ticket_not("Resolved")),
    "edit_ticket": (_ticket_exists, _ticket_fields),
    "ticket_login": (_tk_credentials,),
    "logout": (_tk_logged_in,),
    "get_user_tickets": (_tk_logged_in,),
    # trading
    "get_stock_info": (_stock_known("symbol"),),
    "get_order_details": (_order_exists,),
    "cancel_order": (_order_exists, _order_cancellable),
    "place_order": (_tb_authenticated, _stock_known("symbol"), _order_values),
    "withdraw_funds": (_tb_authenticated, _market_open, _positive_amount, _withdrawable),
    "get_account_info": (_tb_authenticated,),
    "fund_account": (_tb_authenticated, _positive_amount),
    "remove_stock_from_watchlist": (_tb_authenticated, _in_watchlist),
    "get_watchlist": (_tb_authenticated,),
    "get_order_history": (_tb_authenticated,),
    "get_transaction_history": (_tb_authenticated,),
    # travel
    "register_credit_card": (_token_initialised, *_TOKEN, _card_new),
    "get_flight_cost": (_travel_class,),
    "get_credit_card_balance": (*_TOKEN, _card_known),
    "book_flight": (*_TOKEN, _card_known, _airports, _travel_date, _travel_class, _card_over_budget),
    "retrieve_invoice": (*_TOKEN, _booking_known),
    "get_booking_history": _TOKEN,
    "cancel_booking": (*_TOKEN, _booking_known),
    "set_budget_limit": _TOKEN,
    "purchase_insurance": (*_TOKEN, _insurance_in_budget, _booking_known, _card_known),
    "contact_customer_support": (_booking_known,),
    # vehicle
    "startEngine": (_doors_locked, _brake_pressed, _ignition),
    "fillFuelTank": (_fuel_fits,),
    "lockDoors": (_doors_known,),
    "adjustClimateControl": (_between("fanSpeed", 0, 100, default=50),),
    "setHeadlights": (_one_of("mode", ("on", "off", "auto")),),
    "displayCarStatus": (
        _one_of("option", ("fuel", "battery", "doors", "climate", "headlights", "parkingBrake", "brakePedal", "engine")),
    ),
    "activateParkingBrake": (_one_of("mode", ("engage", "release")),),
    "pressBrakePedal": (_between("pedalPosition", 0, 1),),
    "setCruiseControl": (_engine_running, _cruise_speed),
    # math
    "divide": (_nonzero("b"),),
    "percentage": (_nonzero("whole"),),
    "square_root": (_sqrt_domain,),
    "logarithm": (_log_domain,),
    "mean": (_nonempty,),
    "standard_deviation": (_nonempty,),
    "min_value": (_nonempty,),
    "max_value": (_nonempty,),
    "sum_values": (_nonempty,),
}


def first_violation(env: BfclEnv, function: str, args: Mapping[str, Any]) -> str | None:
    """The reason of the first declared rule of ``function`` that fails, or ``None``."""
    for rule in RULES.get(function, ()):
        reason = rule(env, args)
        if reason is not None:
            return reason
    return None
