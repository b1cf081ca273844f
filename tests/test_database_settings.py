"""The database connection as the console opens it."""
import pytest
from django.db import connection


@pytest.mark.postgres
def test_postgresql_compiles_no_query_just_in_time(db):
    """JIT off: a quota sum on a small database was compiled for 0.5 s before it ran in 2 ms."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"


@pytest.mark.postgres
def test_a_quota_page_query_is_not_compiled(db, org):
    from projects.models import Quota

    sql, params = Quota.objects.with_allocation().order_by().query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, SUMMARY) " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "JIT:" not in plan, plan
