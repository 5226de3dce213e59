# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 13 · A sua própria estratégia: uma camada de cache que decide o que guardar
#
# **Objetivo de aprendizagem.** Depois deste notebook, você consegue escrever uma estratégia de cache KV como uma
# subclasse curta de `DynamicLayer` do transformers, rodá-la com
# `model.generate(..., past_key_values=Cache(layer_class_to_replicate=...))`, ver o que ela guarda com `kvlab.watch`
# e medir a sua qualidade num texto longo como faz o artigo do StreamingLLM: perplexidade, token a token, através de um
# cache que nunca passa do seu orçamento.
#
# **Nas palavras do kvlab.** Uma estratégia é uma classe de camada. O seu `update` recebe as novas chaves e valores,
# devolve aquilo a que este passo atende e guarda o que quiser para o próximo; `get_mask_sizes` diz à máscara de
# atenção quantas posições a próxima consulta vê; `get_seq_length` diz de onde as posições continuam. As chaves vão
# para o cache *depois* de o RoPE as ter rotacionado, então uma chave mantida mantém a posição em que foi vista, a
# menos que a estratégia a rotacione de novo.
#
# SmolLM2-135M-Instruct (30 camadas completas) e Gemma 3 270M (5 deslizantes : 1 completa, janela 512), greedy,
# CPU. O texto longo é um capítulo da própria documentação do Python ("Special method names"), já presente em toda
# máquina.

# %%
import kvlab

kvlab.set_language("pt-BR")

# %%
# %matplotlib inline
import functools
import json
import os
import warnings
from pathlib import Path

import ipywidgets as widgets
import torch
from transformers import Cache, DynamicCache
from transformers.cache_utils import DynamicLayer

import kvlab
from kvlab.i18n import _, number
from kvlab.live import live
from kvlab.measure.streaming import frontier_rows, long_text, ratio_interval, stream_nll, summary
from kvlab.plots.streaming import loss_by_position, strategy_frontier
from kvlab.predictions import score
from kvlab.strategies.sinks_window import SinkWindowLayer

warnings.filterwarnings("ignore", message=".*past_key_values.*")
torch.manual_seed(0)
QUICK = os.environ.get("KVLAB_QUICK") == "1"  # um fluxo mais curto na suíte de testes; as saídas verificadas valem nos dois casos
model, tokenizer = kvlab.load("smollm2")
BENCH = Path(kvlab.__file__).resolve().parent.parent / "data" / "bench"

# %% [markdown]
# ## 1. Uma estratégia em vinte linhas
#
# Guardar os 4 primeiros tokens e os 12 últimos, descartar o meio. A classe abaixo é a estratégia inteira. A cada
# passo ela atende a tudo o que guardou mais os tokens novos e depois esquece o meio. `cumulative_length` conta os
# tokens vistos: é onde começa a posição do próximo token, então as posições continuam contando além do que foi
# descartado.

# %%
class KeepFirstAndLast(DynamicLayer):
    first, last = 4, 12  # atributos de classe: o Cache constrói cada camada sem argumento

    def __init__(self):
        super().__init__()
        self.cumulative_length = 0  # tokens vistos: a posição do próximo token

    def update(self, key_states, value_states, *args, **kwargs):
        keys, values = super().update(key_states, value_states)  # (batch, kv_heads, seq, head_dim): todos até agora
        self.cumulative_length += key_states.shape[-2]
        if keys.shape[-2] > self.first + self.last:  # guarda as duas pontas
            self.keys = torch.cat([keys[..., : self.first, :], keys[..., -self.last :, :]], dim=-2)
            self.values = torch.cat([values[..., : self.first, :], values[..., -self.last :, :]], dim=-2)
        return keys, values  # este passo ainda atende a todos eles

    def get_seq_length(self):
        return self.cumulative_length

    def get_mask_sizes(self, query_length):
        kept = self.keys.shape[-2] if self.is_initialized else 0
        return kept + query_length, self.cumulative_length - kept  # (posições lidas pela atenção, posição da primeira)


# %% [markdown]
# **Preveja primeiro.** Um prompt de 12 tokens, 24 tokens novos. O cache recebe 35 tokens (o último token novo
# nunca volta a ser alimentado). Quantos tokens cada camada descartou no fim?

# %%
guess_dropped = None  # tokens que uma camada descartou: o seu palpite

# %% [markdown]
# A chamada pura do transformers, dentro de `kvlab.watch`: os tokens são os mesmos que sem o watch.

# %%
# NBVAL_CHECK_OUTPUT
inputs = tokenizer("The KV cache keeps the keys and values of every token", return_tensors="pt")
plain = model.generate(**inputs, do_sample=False, max_new_tokens=24,
                       past_key_values=Cache(layer_class_to_replicate=KeepFirstAndLast))
with kvlab.watch(model) as watch:
    out = model.generate(**inputs, do_sample=False, max_new_tokens=24,
                         past_key_values=Cache(layer_class_to_replicate=KeepFirstAndLast))
last = watch.trace.final_layers()[0]
print("tokens do prompt:", inputs.input_ids.shape[-1], "| mesmos tokens que sem o watch:", torch.equal(out, plain))
print(f"camada 0: vistos {last['logical_length']}, guardados {last['slots_allocated']}, vivos "
      f"{last['slots_live']}, descartados {last['tokens_evicted']}, {number(last['bytes_held'])} "
      f"B, {number(last['bytes_held'] // last['slots_allocated'])} B por posição")
print(repr(tokenizer.decode(out[0, inputs.input_ids.shape[-1]:])))

# %%
# NBVAL_CHECK_OUTPUT
display(score(guess_dropped, last["tokens_evicted"], unit=" tokens", kind="count"))

# %% [markdown]
# O kvlab leu a classe sem nenhuma linha de instrumentação: 16 posições guardadas (4 + 12), todas vivas, e o resto
# dos 35 tokens vistos descartado. Uma posição de uma camada é uma chave e um valor de 3 cabeças x 64 números em
# float32, 1.536 B, então 16 posições guardam os bytes impressos. A mesma classe roda em
# `kvlab.run(..., cache=KeepFirstAndLast)`, no Explorador de Cache (`kvlab.explore(strategies=[KeepFirstAndLast])`) e,
# salva num arquivo, na linha de comando (`kvlab run --cache my_file.py:KeepFirstAndLast`).

# %% [markdown]
# ## 2. O que acontece quando os primeiros tokens saem?
#
# Uma resposta de chat é curta; um fluxo não é. O artigo do StreamingLLM (fonte: Xiao et al., ICLR 2024) lê um texto
# longo um token por vez através de um cache de tamanho fixo e mede a perplexidade: o quanto o modelo se surpreende com
# cada próximo token do texto real (teacher forcing). Três caches: o completo; uma janela que guarda só os últimos
# tokens; e o mesmo orçamento com os 4 primeiros tokens guardados como "sumidouros" (*attention sinks*) (`SinkWindowLayer`, que vem com o kvlab,
# construída como a classe acima).
#
# **Preveja primeiro.** Depois que os primeiros tokens saíram da janela, quantas vezes a perplexidade do cache
# completo a janela atinge (1 quer dizer nenhuma mudança)? E 4 sumidouros + a janela?

# %%
guess_window_ratio = None  # perplexidade da janela / perplexidade completa: o seu palpite
guess_sinks_ratio = None  # perplexidade de 4 sumidouros + janela / perplexidade completa: o seu palpite

# %%
TOKENS, BUDGET = (160, 32) if QUICK else (384, 64)
ids = tokenizer(long_text(), return_tensors="pt").input_ids[:, :TOKENS]  # (1, TOKENS)


window_only = functools.partial(SinkWindowLayer, sinks=0, window=BUDGET)  # os últimos BUDGET tokens, sem sumidouro
sinks_and_window = functools.partial(SinkWindowLayer, sinks=4, window=BUDGET - 4)  # os 4 primeiros e os últimos
streams = {
    "full": stream_nll(model, ids, DynamicCache(config=model.config), prefill=BUDGET),
    "window": stream_nll(model, ids, Cache(layer_class_to_replicate=window_only), prefill=BUDGET),
    "sinks_original_positions": stream_nll(model, ids, Cache(layer_class_to_replicate=sinks_and_window),
                                           prefill=BUDGET),
}
rows = summary(streams, BUDGET)

# %%
print(f"{TOKENS} tokens, orçamento do cache {BUDGET}; perplexidade "
      f"dos {TOKENS - 1 - BUDGET} tokens lidos depois que ele encheu")
for row in rows:
    print(f"{_(row['label']):>42}: {number(row['ppl'], 2)} ({number(row['low'], 2)}-{number(row['high'], 2)}), "
          f"{number(row['ratio_to_full']['ratio'], 2)}x o cache completo, {number(row['bytes_held'])} B guardados")
ratios = {row["config"]: row["ratio_to_full"]["ratio"] for row in rows}

# %%
display(score(guess_window_ratio, round(ratios["window"], 1), unit="x", kind="amount", label="janela"))
display(score(guess_sinks_ratio, round(ratios["sinks_original_positions"], 1), unit="x", kind="amount",
              label="sumidouros"))

# %%
loss_by_position(rows, BUDGET, title=f"SmolLM2: perda ao longo do texto, caches de {BUDGET} tokens")

# %% [markdown]
# Até a linha tracejada as três curvas são uma só: nenhum cache descartou nada ainda. Logo depois dela a perda da
# janela sobe: os primeiros tokens se foram e, com eles, o lugar onde as cabeças de atenção estacionam o peso de que
# não precisam em outro lugar (o softmax precisa colocá-lo em algum lugar: o *attention sink*). Guardar só 4 deles
# traz a perda de volta para perto da do cache completo, com os bytes da janela, como mostram as razões e os bytes
# impressos. O intervalo é um bootstrap sobre blocos de 32 tokens (as perdas de tokens vizinhos não são
# independentes).

# %% [markdown]
# ## 3. Posições: chaves mantidas mantêm as suas, a menos que você as rotacione
#
# Um sumidouro mantido foi rotacionado na posição 0..3, então uma consulta na posição 700 está a cerca de 700 posições
# dele, por poucos que sejam os tokens do cache. O StreamingLLM, em vez disso, dá posições *dentro do cache*: sumidouros em
# 0..3, a janela logo depois deles, a consulta em seguida, como se o meio descartado nunca tivesse existido. As
# pontuações do RoPE dependem só da distância entre consulta e chave, então o mesmo se obtém rotacionando os sumidouros
# para ficarem logo antes da janela a cada passo (`SinkWindowLayer(inv_freq=...)`: `rotate` em
# `kvlab/strategies/sinks_window.py`). O benchmark abaixo mediu as duas escolhas, (a) posições originais e (b)
# posições dentro do cache, sobre os mesmos tokens.

# %%
bench = json.loads((BENCH / "streaming_quality.json").read_text())
print(f"{bench['tokens']} tokens de {bench['text']}, orçamento de {bench['budget']} por camada")
for result in bench["models"]:
    for row in result["rows"]:
        ratio = row["ratio_to_full"]
        print(f"{result['model']:>8} {_(row['label']):>50}: {number(row['ppl'], 2)} "
              f"({number(row['low'], 2)}-{number(row['high'], 2)}), {number(ratio['ratio'], 2)}x o completo "
              f"({number(ratio['low'], 2)}-{number(ratio['high'], 2)}), {number(row['bytes_held'])} B")
    by_config = {row["config"]: row for row in result["rows"]}
    a, b = (by_config[c]["nll"][bench["budget"]:] for c in ("sinks_original_positions", "sinks_cache_positions"))
    paired = ratio_interval(b, a)
    print(f"{result['model']:>8} (b) / (a): {number(paired['ratio'], 3)} "
          f"({number(paired['low'], 3)}-{number(paired['high'], 3)})")

# %%
gemma_rows = next(result for result in bench["models"] if result["model"] == "gemma3")["rows"]
loss_by_position([row for row in gemma_rows if row["config"] != "key_norm"], bench["budget"],
                 title=f"Gemma 3: perda ao longo do texto, caches de {bench['budget']} tokens (a execução do benchmark)")

# %% [markdown]
# No SmolLM2 as duas escolhas dão a mesma perplexidade: o intervalo de (b) / (a) impresso acima contém 1. No Gemma 3
# não, e a figura mostra onde: com as posições originais a perda dos sumidouros acompanha a da versão rotacionada até por
# volta do token 512 e depois sobe. Dali em diante os sumidouros estão a mais de 512 posições atrás da consulta, mais longe
# do que as camadas deslizantes do Gemma 3 (janela 512) jamais olharam no treino; rotacionados para as posições do
# próprio cache, eles ficam a menos de um orçamento da consulta, e (b) / (a) impresso acima fica bem abaixo de 1.
# Rotacionar ou não o que se guarda faz parte da estratégia.
#
# Os números do próprio artigo, para o Llama-2-13B no primeiro livro do PG-19 com um cache de 1.024 tokens (fonte:
# Xiao et al. 2024, Tabela 1): só a janela 5.158,07, 4 sumidouros + 1.020 recentes 5,40, quatro tokens "\n" como sumidouros
# 5,60. Com 135M e 270M de parâmetros, em 768 tokens através de um cache de 128 tokens, uma parte se reproduz: só a
# janela triplica a perplexidade do cache completo nos dois modelos (cerca de 3x, impresso acima), longe do colapso
# de mil vezes do artigo num livro de 65K tokens; 4 sumidouros trazem a maior parte de volta (com posições dentro do cache
# no Gemma 3), mas não até o cache completo. A variante com sumidouros "\n" não foi medida aqui.

# %% [markdown]
# ## 4. Descarte pela norma da chave, e a fronteira com os tipos do guia
#
# Uma segunda estratégia que vem com o kvlab, `KeyNormLayer` (fonte: Devoto et al., EMNLP 2024; o `KnormPress` do
# kvpress): chaves com norma L2 baixa tendem a atrair atenção, então cada cabeça guarda as suas chaves de menor norma
# (mais os últimos 8 tokens). Mesmo orçamento, mesmos bytes, outra escolha do que guardar. Na fronteira abaixo, os caches
# limitados do texto longo ficam ao lado dos tipos do guia medidos pelo `kvlab bench` (a variação de perplexidade deles é
# sobre janelas curtas da mesma documentação, então compare os dois grupos pela forma, não ponto a ponto). Os sumidouros com
# posições originais ficam de fora: no SmolLM2 o ponto deles cai sobre o dos rotacionados (seção 3).

# %%
guide = json.loads((BENCH / "smollm2.json").read_text())["rows"]
smollm2 = next(result for result in bench["models"] if result["model"] == "smollm2")
drawn = [row for row in smollm2["rows"] if row["config"] != "sinks_original_positions"]  # sobre o ponto de (b) aqui
strategy_frontier(frontier_rows(drawn), guide, title="SmolLM2: os tipos do guia e as estratégias deste notebook")

# %% [markdown]
# Com os mesmos bytes, o descarte pela norma da chave é pior que os sumidouros nos dois modelos aqui (a seção 3 imprimiu
# a sua razão para o cache completo). Pontuado a cada passo de um fluxo, com só os últimos 8 tokens protegidos, ele
# descarta tokens de que o texto ainda precisa. O artigo e o kvpress comprimem um prompt uma vez, antes de gerar, o
# que esta régua não testa: uma estratégia só é tão boa quanto a medida que corresponde a como ela será usada.

# %% [markdown]
# ## 5. A sua vez: sumidouros, janela, orçamento
#
# Mexa nos controles: a janela e os sumidouros são passados pelo SmolLM2 sobre o início do texto e desenhados contra o
# cache completo. Tente 0 sumidouros, depois 1.

# %%
LIVE_TOKENS = 160 if QUICK else 256
live_ids = ids if TOKENS == LIVE_TOKENS else tokenizer(long_text(), return_tensors="pt").input_ids[:, :LIVE_TOKENS]
full_live = stream_nll(model, live_ids, DynamicCache(config=model.config), prefill=8)


def streamed(sinks, window):
    layer = functools.partial(SinkWindowLayer, sinks=sinks, window=window)
    mine = stream_nll(model, live_ids, Cache(layer_class_to_replicate=layer), prefill=8)
    live_rows = summary({"full": full_live, "sinks_window": mine}, sinks + window)
    ratio = number(live_rows[1]["ratio_to_full"]["ratio"], 2)
    return loss_by_position(live_rows, sinks + window, width=16,
                            title=f"{sinks} sumidouros + janela {window}: {ratio}x a perplexidade do cache completo")


live(streamed,
     sinks=widgets.IntSlider(value=4, min=0, max=8, continuous_update=False, description="sumidouros"),
     window=widgets.IntSlider(value=28, min=8, max=64, step=4, continuous_update=False, description="janela"))

# %% [markdown]
# ## Para levar
#
# - Uma estratégia de cache é uma subclasse de `DynamicLayer`: `update` decide o que guardar e devolve aquilo a que
#   este passo atende, `get_mask_sizes` informa a máscara, `get_seq_length` leva as posições adiante. O transformers
#   a roda com `Cache(layer_class_to_replicate=...)`; o kvlab a observa como os tipos do guia.
# - Descartar os primeiros tokens é o que prejudica um cache limitado num texto longo: só a janela perde os
#   sumidouros de atenção, e guardar 4 deles traz a perplexidade de volta para perto da do cache completo, com os bytes da
#   janela.
# - Chaves mantidas mantêm as suas posições do RoPE, a menos que a estratégia as rotacione de novo; a seção 3
#   imprimiu o que rotacioná-las para as posições do próprio cache muda aqui.
# - Meça uma estratégia como o artigo faz: perda por token sobre um texto várias vezes maior que o orçamento, um
#   intervalo sobre blocos de tokens, os bytes guardados (`bench/streaming_quality.py`).
#
# **De volta para:** [00 · Comece aqui](00_start_here.ipynb), ou experimente a sua classe no
# [Explorador de Cache](11_cache_explorer.ipynb).
