"""Composed-once SQL for the writes on a hot path: ``insert`` and conditional ``update`` by primary key, the
statements the ORM would write, each value adapted by its own field, run through Django's cursor (docs/workers.md,
"Performance", says why). No signals, no ``save()`` override, nothing the database computes is read back
(but the auto primary key): the models that use it say so on the manager method.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.db import connections, models, transaction

# (model, alias) -> SQL and the fields of its parameters, in order.
_inserts: dict[tuple[Any, ...], tuple[str, tuple[models.Field[Any, Any], ...]]] = {}
# The shape of an update -> SQL, the fields it assigns and the fields it compares.
_updates: dict[tuple[Any, ...], tuple[str, tuple[models.Field[Any, Any], ...], tuple[models.Field[Any, Any], ...]]] = {}


# The field classes (exactly these, not subclasses) whose ``get_db_prep_save`` returns a value of this type unchanged
# on every backend: ``CharField.to_python`` and ``FloatField.get_prep_value`` keep a ``str`` or a ``float`` as it is,
# and neither adapts it for the database further (unlike integers, dates and JSON, which the backend adapts).
_PLAIN: dict[type, type] = {models.CharField: str, models.TextField: str, models.FloatField: float}


def _field(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, models.Field) and field.concrete, f"{model.__name__}.{name} is not a column"
    return field


def _column(alias: str, field: models.Field[Any, Any]) -> str:
    return str(connections[alias].ops.quote_name(str(field.column)))


def _table(alias: str, model: type[models.Model]) -> str:
    return str(connections[alias].ops.quote_name(model._meta.db_table))


def insert(obj: models.Model, *, using: str = "default", unless: str | None = None) -> bool:
    """INSERT ``obj`` (a new instance, defaults applied by its constructor) and set its primary key; returns
    whether it was inserted. ``unless``: a unique field; a row holding the same value already wins (``ON CONFLICT
    (that column) DO NOTHING``: nothing is inserted, ``obj`` keeps no primary key)."""
    model = type(obj)
    connection = connections[using]
    assert model._meta.pk is not None
    pk_field = _field(model, model._meta.pk.name)
    returns = bool(connection.features.can_return_columns_from_insert)
    assert returns or unless is None, "a conditional insert needs INSERT … RETURNING"
    key = (model, using, unless)
    if key not in _inserts:
        fields = tuple(field for field in model._meta.concrete_fields if field is not pk_field)
        # Identifiers from the model's meta, quoted by the backend; every value is a parameter.
        sql = "INSERT INTO {} ({}) VALUES ({})".format(  # noqa: S608
            _table(using, model),
            ", ".join(_column(using, field) for field in fields),
            ", ".join(["%s"] * len(fields)),
        )
        if unless is not None:
            sql = f"{sql} ON CONFLICT ({_column(using, _field(model, unless))}) DO NOTHING"
        if returns:
            returning, _params = connection.ops.return_insert_columns([pk_field])  # type: ignore[attr-defined]
            sql = f"{sql} {returning}"
        _inserts[key] = (sql, fields)
    sql, fields = _inserts[key]
    params = [field.get_db_prep_save(getattr(obj, field.attname), connection) for field in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        if returns:
            row = cursor.fetchone()
            if row is None:  # the conflict of ``unless``: the other row stays
                return False
            pk = row[0]
        else:
            pk = connection.ops.last_insert_id(cursor, model._meta.db_table, str(pk_field.column))
    obj.pk = pk
    obj._state.adding = False
    obj._state.db = using
    return True


def update(
    model: type[models.Model],
    pk: Any,
    values: Mapping[str, Any],
    *,
    equal: Mapping[str, Any] | None = None,
    not_in: Mapping[str, Iterable[Any]] | None = None,
    increment: Iterable[str] = (),
    using: str = "default",
) -> int:
    """``UPDATE … SET values, each of increment = itself + 1 WHERE pk = pk AND each of equal = its value AND
    each of not_in NOT IN its values``; returns the number of rows it changed (0 or 1). Keys are field names."""
    equal = equal or {}
    excluded = {name: tuple(choices) for name, choices in (not_in or {}).items()}
    increment = tuple(increment)
    connection = connections[using]
    key = (
        model,
        using,
        tuple(values),
        tuple(equal),
        tuple((name, len(choices)) for name, choices in excluded.items()),
        increment,
    )
    if key not in _updates:
        assigned = tuple(_field(model, name) for name in values)
        compared = tuple(_field(model, name) for name in equal)
        setters = [f"{_column(using, field)} = %s" for field in assigned]
        for name in increment:
            column = _column(using, _field(model, name))
            setters.append(f"{column} = {column} + 1")
        assert model._meta.pk is not None
        conditions = [f"{_column(using, _field(model, model._meta.pk.name))} = %s"]
        conditions += [f"{_column(using, field)} = %s" for field in compared]
        conditions += [
            "{} NOT IN ({})".format(_column(using, _field(model, name)), ", ".join(["%s"] * len(choices)))
            for name, choices in excluded.items()
        ]
        sql = "UPDATE {} SET {} WHERE {}".format(  # noqa: S608 (as in insert: quoted identifiers, parameters)
            _table(using, model), ", ".join(setters), " AND ".join(conditions)
        )
        _updates[key] = (sql, assigned, compared)
    sql, assigned, compared = _updates[key]
    params = [field.get_db_prep_save(value, connection) for field, value in zip(assigned, values.values(), strict=True)]
    params.append(pk)
    params += [field.get_db_prep_save(value, connection) for field, value in zip(compared, equal.values(), strict=True)]
    for choices in excluded.values():
        params.extend(choices)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def insert_many(model: type[models.Model], rows: Iterable[Mapping[str, Any]], *, using: str = "default") -> None:
    """INSERT every row (``{attname: value}``, every column but the auto primary key) in one transaction; nothing is
    read back. On PostgreSQL the rows go in one ``COPY … FROM STDIN`` (psycopg dumps each value in C, with no
    statement per row); elsewhere in one ``executemany`` of ``insert``'s statement."""
    connection = connections[using]
    copy = connection.vendor == "postgresql"
    key = (model, using, "copy" if copy else "many")
    if key not in _inserts:
        fields = tuple(field for field in model._meta.concrete_fields if not field.primary_key)
        columns = ", ".join(_column(using, field) for field in fields)
        # As in insert: quoted identifiers from the model's meta; every value is a parameter or a COPY field.
        if copy:
            sql = f"COPY {_table(using, model)} ({columns}) FROM STDIN"
        else:
            sql = f"INSERT INTO {_table(using, model)} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"  # noqa: S608
        _inserts[key] = (sql, fields)
    sql, fields = _inserts[key]
    plan = [(field.attname, field, _PLAIN.get(type(field)), type(field) is models.DateTimeField) for field in fields]
    adapt_datetime = connection.ops.adapt_datetimefield_value
    # Each value as its field's get_db_prep_save returns it, at less cost where that is certain:
    # - a value of its column's plain type is returned unchanged: passed as it is (most of an audit row's columns);
    # - an aware datetime in an exact DateTimeField needs only the backend's adaptation (get_prep_value keeps it);
    # - an int or None (foreign keys, codes) is adapted once per column and batch: its adaptation depends on the
    #   value alone, and a batch's rows share a few tenants, servers and agents.
    known: dict[tuple[int, int | None], Any] = {}
    params: list[list[Any]] = []
    for row in rows:
        values = []
        for index, (attname, field, plain, moment) in enumerate(plan):
            value = row[attname]
            kind = type(value)
            if kind is plain:
                values.append(value)
            elif moment and kind is datetime and value.utcoffset() is not None:
                values.append(adapt_datetime(value))
            elif kind is int or value is None:
                seen = (index, value)
                if seen not in known:
                    known[seen] = field.get_db_prep_save(value, connection)
                values.append(known[seen])
            else:
                values.append(field.get_db_prep_save(value, connection))
        params.append(values)
    with transaction.atomic(using=using, savepoint=False), connection.cursor() as cursor:
        if copy:
            # Django's cursor has no COPY: psycopg's own, inside Django's error translation (a DatabaseError).
            with connection.wrap_database_errors, cursor.cursor.copy(sql) as stream:
                for values in params:
                    stream.write_row(values)
        else:
            cursor.executemany(sql, params)
