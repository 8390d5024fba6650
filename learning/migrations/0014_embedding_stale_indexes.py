"""The indexes that let the embedding backfill find catalogue and learned phrases, aliases, blocks and evidence needing a vector by index lookups (a partial index of
stale rows, an index of the vector's model), and statistics on staleness, so PostgreSQL knows how few rows are stale.

The indexes build CONCURRENTLY (outside a transaction): the tables take writes while they build. A build that is
interrupted leaves an INVALID index: migrate again (the indexes built are kept, an INVALID one is built again)."""

from django.db import migrations, models

from common.migration_ops import AddIndexConcurrentlyResumable

from embeddings.migration_ops import EmbeddingStaleStatistics
from embeddings.models import EmbeddingStale


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY: writes to the table go on while an index builds

    dependencies = [
        ("embeddings", "0003_embedding_stale_function"),
        ("learning", "0013_disambiguation_sweep_failures"),
    ]

    operations = [
        AddIndexConcurrentlyResumable(
            model_name="entityalias",
            index=models.Index(condition=models.Q(EmbeddingStale("normalized")), fields=["id"], name="entityalias_emb_stale"),
        ),
        AddIndexConcurrentlyResumable(
            model_name="entityalias", index=models.Index(fields=["embedding_model"], name="entityalias_emb_model")
        ),
        EmbeddingStaleStatistics(model_name="entityalias", text_field="normalized"),
        AddIndexConcurrentlyResumable(
            model_name="learnedphrase",
            index=models.Index(condition=models.Q(EmbeddingStale("normalized")), fields=["id"], name="learnedphrase_emb_stale"),
        ),
        AddIndexConcurrentlyResumable(
            model_name="learnedphrase", index=models.Index(fields=["embedding_model"], name="learnedphrase_emb_model")
        ),
        EmbeddingStaleStatistics(model_name="learnedphrase", text_field="normalized"),
        AddIndexConcurrentlyResumable(
            model_name="phraseblock",
            index=models.Index(condition=models.Q(EmbeddingStale("normalized")), fields=["id"], name="phraseblock_emb_stale"),
        ),
        AddIndexConcurrentlyResumable(
            model_name="phraseblock", index=models.Index(fields=["embedding_model"], name="phraseblock_emb_model")
        ),
        EmbeddingStaleStatistics(model_name="phraseblock", text_field="normalized"),
        AddIndexConcurrentlyResumable(
            model_name="phraseevidence",
            index=models.Index(condition=models.Q(EmbeddingStale("normalized")), fields=["id"], name="phraseevidence_emb_stale"),
        ),
        AddIndexConcurrentlyResumable(
            model_name="phraseevidence", index=models.Index(fields=["embedding_model"], name="phraseevidence_emb_model")
        ),
        EmbeddingStaleStatistics(model_name="phraseevidence", text_field="normalized"),
        AddIndexConcurrentlyResumable(
            model_name="verbphrase",
            index=models.Index(condition=models.Q(EmbeddingStale("normalized")), fields=["id"], name="verbphrase_emb_stale"),
        ),
        AddIndexConcurrentlyResumable(
            model_name="verbphrase", index=models.Index(fields=["embedding_model"], name="verbphrase_emb_model")
        ),
        EmbeddingStaleStatistics(model_name="verbphrase", text_field="normalized"),
    ]
