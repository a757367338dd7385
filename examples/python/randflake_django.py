"""randflake_pg's SQL functions as Django expressions (Django 5.0 or newer, for `db_default`).

    from randflake_django import RandflakeNext

    class Order(models.Model):
        id = models.BigIntegerField(primary_key=True, db_default=RandflakeNext())

The database fills the key: `save()` sends `INSERT ... VALUES (DEFAULT, ...) RETURNING "id"` and
sets `order.id` from the RETURNING row. Copy this module into the project; migrations refer to
RandflakeNext by its import path.
"""

from __future__ import annotations

from django.db import models


class RandflakeNext(models.Func):
    """randflake_next(): a new ID, for `db_default`."""

    function = "randflake_next"
    arity = 0
    output_field = models.BigIntegerField()


class RandflakeToString(models.Func):
    """randflake_to_string(id): the canonical string, e.g. for URLs and JSON."""

    function = "randflake_to_string"
    arity = 1
    output_field = models.TextField()


class RandflakeFromString(models.Func):
    """randflake_from_string(text): the ID a canonical string names."""

    function = "randflake_from_string"
    arity = 1
    output_field = models.BigIntegerField()


class RandflakeTimestamp(models.Func):
    """randflake_timestamp(id): the second the ID was made in. Needs EXECUTE, which only roles
    the DBA granted it to have."""

    function = "randflake_timestamp"
    arity = 1
    output_field = models.DateTimeField()


class RandflakeKeyField(models.Field):
    """A randflake_key column: the canonical string in Python (psycopg reads the type's text form),
    the plain value on disk, so that the index follows creation time. A string compares with it
    as text (`PublicIdExact` below); an int must be cast:
    `filter(pk=Cast(Value(public_id), models.BigIntegerField()))`."""

    description = "A Randflake ID ordered on disk, shown as its canonical string"

    def db_type(self, connection):
        return "randflake_key"


@RandflakeKeyField.register_lookup
class PublicIdExact(models.lookups.Exact):
    """`filter(pk=string)`: the string sent as text, which the key compares with as a public ID
    through its index. psycopg sends a str untyped, which the server would read as a key, and
    making a key needs the decoder grant (EXECUTE on randflake_decode(bigint)) that an
    application's role should not hold."""

    def process_rhs(self, compiler, connection):
        sql, params = super().process_rhs(compiler, connection)
        if self.rhs_is_direct_value():
            return f"({sql})::text", params
        return sql, params


class RandflakeNextKey(models.Func):
    """randflake_next_key(): a new randflake_key, for `db_default`."""

    function = "randflake_next_key"
    arity = 0
    output_field = RandflakeKeyField()
