"""Where the test suite finds its services: ``TB_TEST_*`` environment variables.

The suite flushes the DBs named here (and only those), so two suites sharing one Redis must
give each other different DBs, or different servers. A DB that holds keys this suite does not
write is never flushed unless ``TB_TEST_FLUSH_ANY=1`` says it may be.
"""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict


class SuiteSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TB_TEST_", extra="ignore")

    #: The Redis server of every test (store, broker, result backend).
    redis_host: str = "127.0.0.1"
    redis_port: int = 6379
    #: The canonical store's DB.
    store_db: int = 11
    #: The broker's DB of the in-process worker.
    broker_db: int = 12
    #: The result backend's DB.
    backend_db: int = 13
    #: The broker DB of worker subprocesses, apart from the in-process worker's queues.
    subprocess_broker_db: int = 10
    #: RabbitMQ, for the tests that run once more with it as the broker.
    amqp_url: str = "amqp://guest:guest@127.0.0.1:5672//"
    #: PostgreSQL, for the example report tool's tests: a role that may create databases.
    pg_dsn: str = "postgresql://postgres@127.0.0.1:5432/postgres"
    #: The tests' scratch databases are named ``<prefix>_<pid>_<random>`` (and dropped).
    pg_db_prefix: str = "tb_test"
    #: Flush a test DB even when it holds keys this suite does not write.
    flush_any: bool = False

    @property
    def flushed_dbs(self) -> tuple[int, ...]:
        return (self.store_db, self.broker_db, self.backend_db, self.subprocess_broker_db)


SUITE = SuiteSettings()
