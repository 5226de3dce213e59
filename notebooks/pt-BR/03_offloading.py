# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · Descarregamento (offloading): o cache fica na CPU, e só uma ou duas camadas por vez vão ao acelerador
#
# **Objetivo de aprendizagem.** Rodar os caches descarregados do guia de cache (`cache_implementation="offloaded"` /
# `"offloaded_static"`, `DynamicCache(..., offloading=True)`), saber o que eles mantêm no acelerador e por que o
# transformers puro os recusa nesta máquina só com CPU, ler o cronograma de pré-carregamento e descarregamento deles,
# medir o que `offload_only_non_sliding` mantém no dispositivo num modelo com janela deslizante e recorrer ao
# descarregamento quando a memória acaba.
#
# **Nas palavras do kvlab.** Um cache descarregado guarda todas as camadas na memória da CPU. Enquanto a camada *i*
# calcula, ele copia a próxima camada descarregada para o acelerador (um *pré-carregamento*, ou *prefetch*, num stream
# secundário, para que possa se sobrepor ao cálculo) e, quando a camada *i* termina, a devolve à CPU (um
# *descarregamento*, ou *offload*). Assim, o acelerador guarda só as camadas que estão entre o seu pré-carregamento e o
# seu descarregamento; o preço são duas cópias por camada, a cada passo, pelo barramento. `offloaded_static` faz o
# mesmo com as camadas de tamanho fixo do StaticCache.
#
# **Nesta máquina não há acelerador**, então as cópias são operações CPU-para-CPU que não fazem nada. Dentro de
# `kvlab.watch`, o kvlab executa mesmo assim o cronograma exato do transformers, registra cada movimentação e calcula, a
# partir do registro, os bytes que *estariam* residentes no dispositivo: todas as camadas, para um cache comum; para um
# descarregado, só as camadas entre o pré-carregamento e o descarregamento delas. A seção 5 conta os bytes que as
# movimentações levariam pelo barramento, mede aqui o tempo da decodificação com e sem descarregamento e estima o que o
# barramento acrescentaria numa GPU.

# %%
import kvlab

kvlab.set_language("pt-BR")

# %%
# %matplotlib inline
import inspect
import os
import warnings
from collections import Counter

import ipywidgets as widgets
import torch
import transformers
from transformers import DynamicCache, StaticCache
from transformers.cache_utils import Cache

import kvlab
from kvlab.i18n import _, cache_kind_label, layer_kind_label, number, percent
from kvlab.live import live
from kvlab.measure import offload_time, residency, resilient, step_times, text
from kvlab.measure.formula import bytes_per_token_per_layer
from kvlab.measure.timing import compare
from kvlab.plots import residency as residency_plot
from kvlab.plots import timeline
from kvlab.predictions import score

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")  # o transformers 5.24 escreve `cache=`
torch.manual_seed(0)
transformers.logging.disable_progress_bar()
QUICK = os.environ.get("KVLAB_QUICK") == "1"  # encurta as execuções cronometradas na CI; as saídas verificadas valem de qualquer forma
smollm2, smollm2_tokenizer = kvlab.load("smollm2")  # 30 camadas de atenção completa
gemma, gemma_tokenizer = kvlab.load("gemma3")  # 18 camadas: 5 deslizantes (janela 512), depois 1 completa, três vezes

# %% [markdown]
# ## 1. Cache offloading
#
# A chamada do guia: dar o nome do cache descarregado em `generate`. Com esta build do torch, que é só para CPU, ela falha:

# %% tags=["raises-exception"]
inputs = smollm2_tokenizer("Moving a layer's keys and values to the CPU between uses", return_tensors="pt")
out = smollm2.generate(**inputs, do_sample=False, max_new_tokens=8, cache_implementation="offloaded")

# %% [markdown]
# O erro é do próprio transformers: sempre que `offloading` está ativo, `Cache.update` primeiro faz o stream padrão do
# CUDA esperar pelo stream de pré-carregamento, antes de cada camada, seja qual for o dispositivo dos tensores. Num torch
# sem CUDA, essa chamada não pode rodar:

# %%
# NBVAL_CHECK_OUTPUT
print("torch.cuda.is_available():", torch.cuda.is_available())
print("em Cache.update:", next(line.strip() for line in inspect.getsource(Cache.update).splitlines()
                               if "wait_stream" in line))

# %% [markdown]
# Dentro de `kvlab.watch`, a mesma chamada roda: o gêmeo do cache descarregado que o kvlab usa executa o cronograma do
# transformers (pré-carregamento, atualização, descarregamento, camada por camada) e só sincroniza os streams quando os
# tensores estão num acelerador. Abaixo: o cache padrão, os dois nomes do guia e os dois caches criados à mão, como o
# guia também mostra, `DynamicCache(config=..., offloading=True)` e `StaticCache(config=..., max_cache_len=...,
# offloading=True)` passados como `past_key_values`.
#
# **Preveja primeiro.** O SmolLM2 tem 30 camadas. Com `cache_implementation="offloaded"`, que porcentagem do cache
# inteiro fica no dispositivo no pico? E os tokens gerados de alguma das cinco execuções diferem dos do cache padrão
# (True ou False)?

# %%
guess = None  # % do cache inteiro no dispositivo no pico, cache_implementation="offloaded": seu palpite
guess_tokens_differ = None  # True ou False: seu palpite

# %%
with kvlab.watch(smollm2) as watch:
    out_default = smollm2.generate(**inputs, do_sample=False, max_new_tokens=8)
    out_offloaded = smollm2.generate(**inputs, do_sample=False, max_new_tokens=8, cache_implementation="offloaded")
    out_own = smollm2.generate(**inputs, do_sample=False, max_new_tokens=8,
                               past_key_values=DynamicCache(config=smollm2.config, offloading=True))
    out_static = smollm2.generate(**inputs, do_sample=False, max_new_tokens=8,
                                  cache_implementation="offloaded_static")
    slots = inputs.input_ids.shape[-1] + 8 - 1  # o tamanho que o generate dá ao offloaded_static: max_length - 1
    out_static_own = smollm2.generate(**inputs, do_sample=False, max_new_tokens=8,
                                      past_key_values=StaticCache(config=smollm2.config, max_cache_len=slots,
                                                                  offloading=True))
outputs = {"cache padrão": out_default, 'cache_implementation="offloaded"': out_offloaded,
           "DynamicCache(offloading=True)": out_own, 'cache_implementation="offloaded_static"': out_static,
           "StaticCache(offloading=True)": out_static_own}
runs = dict(zip(outputs, watch.traces))  # os cinco caches observados, na ordem em que rodaram

# %%
# NBVAL_CHECK_OUTPUT
offloaded = runs['cache_implementation="offloaded"']
share = 100 * residency.device_peak(offloaded) / offloaded.summary()["peak_bytes"]
display(score(guess, round(share, 2), unit="%", kind="share"))
tokens_differ = not all(torch.equal(generated, out_default) for generated in outputs.values())
display(score(guess_tokens_differ, tokens_differ, kind="choice"))

# %%
# NBVAL_CHECK_OUTPUT
per_layer = bytes_per_token_per_layer(smollm2.config, torch.float32)  # chaves + valores: 2 × 3 cabeças × 64 × 4 bytes
print(f"prompt: {inputs.input_ids.shape[-1]} tokens, 8 novos; um token: {number(per_layer)} bytes por camada, "
      f"{number(smollm2.config.num_hidden_layers * per_layer)} em todas as {smollm2.config.num_hidden_layers} camadas")
print(f"{'cache':>40} {'pico disp.':>12} {'cache todo':>12} {'movim.':>6} {'bytes mov.':>12}  mesmos tokens")
for name, trace in runs.items():
    moves = residency.effective_moves(trace)
    print(f"{name:>40} {number(residency.device_peak(trace)):>12} {number(trace.summary()['peak_bytes']):>12} "
          f"{len(moves):>6} {number(sum(e['bytes'] for e in moves)):>12}  {torch.equal(outputs[name], out_default)}")

# %% [markdown]
# O cache descarregado atinge, no dispositivo, um pico equivalente a duas camadas, 2/30 do cache inteiro (58.368 de
# 875.520 bytes): a camada que está calculando e a que está sendo pré-carregada. O `DynamicCache(offloading=True)`
# criado à mão é o mesmo cache que `cache_implementation="offloaded"`, movimentação por movimentação.
# `offloaded_static` mantém duas camadas *pré-alocadas*: `generate` dimensiona um cache estático com `max_length - 1`
# posições (código-fonte do transformers), 12 + 8 − 1 = 19 tokens, já que o último token novo nunca volta a passar
# pelo modelo; 19 × 46.080 = 875.520 bytes, o cache inteiro da tabela. Cada movimentação copia essa alocação inteira,
# posições vazias incluídas, daí os seus bytes movidos maiores. O `StaticCache(..., max_cache_len=19,
# offloading=True)` criado à mão é o mesmo cache que `offloaded_static`, movimentação por movimentação. Os tokens são
# idênticos nas cinco execuções: o descarregamento move os dados, nunca os altera.
#
# A conta a pagar é o tráfego. Por passo:

# %%
# NBVAL_CHECK_OUTPUT
per_step = Counter((e["step"], e["direction"]) for e in residency.effective_moves(offloaded))
for step in sorted({s for s, _ in per_step}):
    print(f"passo {step}: {per_step[(step, 'prefetch')]:>2} pré-carregamentos, "
          f"{per_step[(step, 'offload')]:>2} descarregamentos")

# %% [markdown]
# No pré-preenchimento, cada camada é criada no dispositivo e descarregada depois da sua atualização (30
# descarregamentos), e uma camada é pré-carregada para o próximo passo (1 pré-carregamento). Cada passo de
# decodificação pré-carrega e descarrega cada camada uma vez (60 movimentações). 8 tokens novos levam o
# pré-preenchimento e 7 passos de decodificação: 31 + 7 × 60 = 451 movimentações, a contagem da tabela.
#
# ## 2. Cache offloading: o cronograma, em gráfico
#
# Em um passo de decodificação, cada uma das 30 camadas é pré-carregada, atualizada e descarregada.
# **Preveja primeiro.** Enquanto a última camada (29) calcula, qual camada é pré-carregada?

# %%
guess = None  # um índice de camada: seu palpite

# %%
# NBVAL_CHECK_OUTPUT
order = [f"{e['direction'] if e['type'] == 'transfer' else 'update'} {e['layer_idx']}"
         for e in residency.schedule(offloaded, steps=(1, 1))]  # o cronograma do passo 1, na ordem em que o dispositivo o viu
last_update = order.index("update 29")
prefetched_then = next(int(e.split()[1]) for e in reversed(order[:last_update]) if e.startswith("prefetch"))
display(score(guess, prefetched_then, kind="choice"))

# %%
timeline.plot_timeline(offloaded, steps=(1, 2), title='SmolLM2, cache_implementation="offloaded": '
                                                      'dois passos de decodificação')

# %%
# NBVAL_CHECK_OUTPUT
shown = [f"{_(move)} {layer}" for move, layer in (e.split() for e in order)]  # as movimentações nas palavras do leitor
print(" → ".join(shown[:7]), "…")
print("…", " → ".join(shown[-4:]))

# %% [markdown]
# Cada camada é pré-carregada enquanto a anterior calcula, depois é atualizada e então descarregada; enquanto a última
# camada calcula, a camada 0 é pré-carregada para o próximo passo, então o cronograma dá a volta: na figura, o ▲ da
# camada 0 logo à esquerda da linha pontilhada (pré-carregada no passo 1 para o passo 2) e de novo no canto superior
# direito, no fim do passo 2.
#
# ## 3. Cache offloading: `offload_only_non_sliding` no Gemma 3
#
# O guia menciona mais uma opção de `DynamicCache` e `StaticCache`: `offload_only_non_sliding`, que deixa as camadas de
# janela deslizante no dispositivo e descarrega só as outras. Quais são os valores padrão dela nesta versão? As
# assinaturas, e os caches que `generate` cria para os dois nomes:

# %%
gemma_inputs = {"input_ids": text.prompt_ids(gemma_tokenizer, 600)}  # (1, 600): além da janela de 512 tokens
gemma_inputs["attention_mask"] = torch.ones_like(gemma_inputs["input_ids"])
with kvlab.watch(gemma) as watch:
    gemma.generate(**gemma_inputs, do_sample=False, max_new_tokens=4, cache_implementation="offloaded")
    gemma.generate(**gemma_inputs, do_sample=False, max_new_tokens=4,
                   past_key_values=DynamicCache(config=gemma.config, offloading=True, offload_only_non_sliding=True))
    gemma.generate(**gemma_inputs, do_sample=False, max_new_tokens=4, cache_implementation="offloaded_static")
gemma_runs = dict(zip(["offloaded", "DynamicCache(..., True)", "offloaded_static"], watch.traces))

# %%
# NBVAL_CHECK_OUTPUT
for cls in (DynamicCache, StaticCache):
    default = inspect.signature(cls).parameters["offload_only_non_sliding"].default
    print(f"{cls.__name__}(offloading=True): o padrão de offload_only_non_sliding é {default}")
for name, cache in zip(gemma_runs, watch.caches):
    print(f"{name!r:>25}: {type(cache).__name__}, only_non_sliding={cache.only_non_sliding}")

# %% [markdown]
# Portanto, `True` é o padrão do `StaticCache` e, por consequência, de `cache_implementation="offloaded_static"`;
# `DynamicCache`, e com ele `cache_implementation="offloaded"`, tem `False` como padrão e descarrega todas as camadas.
# `generate` não aceita essa opção: para ter `True` com um cache dinâmico, crie o cache você mesmo.
#
# **Preveja primeiro.** Gemma 3 com um prompt de 600 tokens, além da sua janela de 512 tokens, e 4 tokens novos. No
# pico do último passo, que porcentagem do cache inteiro está no dispositivo com `True`, e com `False`?

# %%
guess_true = None  # % do cache no dispositivo, offload_only_non_sliding=True: seu palpite
guess_false = None  # % com False (cache_implementation="offloaded"): seu palpite

# %%
# NBVAL_CHECK_OUTPUT
settings = {"True": gemma_runs["DynamicCache(..., True)"], "False (cache descarregado)": gemma_runs["offloaded"],
            "True (offloaded_static)": gemma_runs["offloaded_static"]}
for guessed, trace in ((guess_true, settings["True"]), (guess_false, settings["False (cache descarregado)"])):
    last = residency.device_bytes_by_step(trace)[-1]
    display(score(guessed, round(100 * last["device_peak_bytes"] / last["cache_bytes_at_peak"], 1), unit="%",
                  kind="share"))

# %%
# NBVAL_CHECK_OUTPUT
print(f"um token do Gemma 3 numa camada: {number(bytes_per_token_per_layer(gemma.config, torch.float32))} bytes")
for name, trace in settings.items():
    moved = sorted({e["layer_idx"] for e in residency.effective_moves(trace)})
    print(f"offload_only_non_sliding={name}: camadas movidas {moved}, "
          f"{len(residency.effective_moves(trace))} movimentações em {trace.summary()['steps']} passos")
    for row in residency.device_bytes_by_step(trace):
        kinds = ", ".join(f"{layer_kind_label(kind)} {number(b)}"
                          for kind, b in sorted(row["device_bytes_by_layer_kind"].items()))
        share = 100 * row["device_peak_bytes"] / row["cache_bytes_at_peak"]
        print(f"  passo {row['step']}: pico no dispositivo {number(row['device_peak_bytes']):>10} "
              f"de {number(row['cache_bytes_at_peak']):>10} bytes ({percent(share, 1):>6}; "
              f"{kinds}), {len(row['resident_at_peak'])} camadas residentes")

# %%
residency_plot.plot_device_bytes({"offload_only_non_sliding=True": settings["True"],
                                  "False (cache_implementation='offloaded')": settings["False (cache descarregado)"]},
                                 title="Gemma 3, prompt de 600 tokens: bytes do "
                                       "cache no dispositivo no pico de cada passo")

# %% [markdown]
# O que a medição mostra, além da janela:
#
# - Com `True`, só as camadas 5, 11 e 17 se movem. No pico de cada passo, o dispositivo guarda as 15 camadas deslizantes
#   *e* duas das três camadas completas (a que está calculando e a próxima, pré-carregada): 17 de 18 camadas,
#   93,6-94,4% do cache. Isso economiza uma camada completa (1.234.944 bytes no passo 3), não a maior parte do cache.
# - Com `False`, todas as camadas se movem, e o dispositivo guarda duas camadas no pico (uma completa e uma deslizante),
#   11,1-11,8% do cache aqui, ao custo de mover 18 camadas duas vezes por passo em vez de 3 (127 movimentações
#   contra 22).
# - Uma camada deslizante para de crescer na janela: depois da sua primeira atualização de decodificação, ela guarda
#   512 tokens, 512 × 2.048 = 1.048.576 bytes, enquanto uma camada completa cresce 2.048 bytes por token (1.228.800 →
#   1.230.848 → 1.232.896 → 1.234.944 nas linhas de `False`). No pré-preenchimento, os buffers das camadas deslizantes
#   ainda guardam o prompt inteiro de 600 tokens, 1.228.800 bytes cada (elas mantêm uma view dos últimos 511 tokens
#   dele), e é por isso que o passo 0 é o maior. Durante o passo 1, as camadas deslizantes ainda não atualizadas
#   continuam com esses buffers, então cada camada deslizante no dispositivo só cai para 1.048.576 bytes a partir do
#   passo 2 (15 × 1.048.576 = 15.728.640 com `True`).
# - `offloaded_static` (`True`) aloca suas 3 camadas completas com `max_length - 1` = 600 + 4 − 1 = 603 tokens
#   (603 × 2.048 = 1.234.944 bytes) e suas camadas deslizantes com a janela de 512 tokens, e mantém as mesmas 17 de 18
#   camadas no dispositivo.
#
# Portanto, `True` não mantém a fatia do dispositivo pequena nem limitada: as 15 camadas deslizantes ficam, e as duas
# camadas completas residentes continuam crescendo com a sequência. O que se ganha são menos cópias: 3 camadas se movem
# em vez de 18 (22 movimentações contra 127). O motivo do guia para a opção é que as camadas deslizantes "geralmente são
# curtas de qualquer forma", então descarregá-las pode custar velocidade por pouca memória. No Gemma 3, com este
# comprimento, elas não são pouca coisa: no passo 3 elas guardam 15.728.640 dos 19.433.472 bytes do cache, então
# mantê-las no dispositivo mantém lá 93,6% do cache, contra 11,8% com `False`. A parte delas fica em 15 camadas × 512
# tokens enquanto as camadas completas crescem, então a sua fatia só diminui quando a sequência passa muito da janela.
# A seção 5 conta os bytes que cada configuração move e estima quanto eles custariam numa GPU.
#
# **Experimente.** Alterne `offload_only_non_sliding` e mova o comprimento do prompt: cada ajuste gera 2 tokens no
# Gemma 3 com `DynamicCache(config=gemma.config, offloading=True, offload_only_non_sliding=...)` dentro de
# `kvlab.watch` e desenha os bytes residentes no dispositivo a cada passo.

# %%
def measure_device_bytes(offload_only_non_sliding, prompt_tokens):
    ids = text.prompt_ids(gemma_tokenizer, prompt_tokens)
    cache = DynamicCache(config=gemma.config, offloading=True, offload_only_non_sliding=offload_only_non_sliding)
    with kvlab.watch(gemma) as watch:
        gemma.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=2,
                       past_key_values=cache)
    return residency_plot.plot_device_bytes(
        {f"offload_only_non_sliding={offload_only_non_sliding}": watch.trace},
        title=f"Gemma 3, prompt de {prompt_tokens} tokens: pico no dispositivo por passo (% do cache inteiro)")


live(measure_device_bytes,
     offload_only_non_sliding=widgets.ToggleButtons(options=[True, False], value=True,
                                                    description="só não deslizantes"),
     prompt_tokens=widgets.IntSlider(value=600, min=100, max=700, step=100, continuous_update=False,
                                     description="tokens do prompt"))

# %% [markdown]
# ## 4. Cache offloading: recorrer ao descarregamento quando a memória acaba
#
# A ideia do guia: chamar `generate`; se o acelerador levantar `torch.OutOfMemoryError`, liberar o que for possível e
# chamar de novo com `cache_implementation="offloaded"`. Nas nossas palavras:

# %%
def generate_or_offload(model, **kwargs):
    """`generate`; on an out-of-memory error, once more with the offloaded cache."""
    try:
        return model.generate(**kwargs)
    except torch.OutOfMemoryError as err:
        print(f"capturado: {type(err).__name__}")  # numa GPU, a mensagem diz quanto foi pedido
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # devolve os blocos da tentativa que falhou antes de tentar de novo
    print("tentando de novo com cache_implementation='offloaded'")
    return model.generate(**{**kwargs, "cache_implementation": "offloaded"})


# %% [markdown]
# **O que é simulado.** Nada fica sem memória nesta CPU, então `resilient.simulated_device` faz o papel de um acelerador
# pequeno. Depois de cada camada do decoder, ele soma os bytes do cache KV que estariam no dispositivo (lidos do
# registro do watch: todas as camadas de um cache comum; para um descarregado, a camada que acabou de calcular mais a
# pré-carregada) e levanta `SimulatedOutOfMemoryError`, uma subclasse de `torch.OutOfMemoryError`, assim que eles passam
# do orçamento. Só o cache é contado, não os pesos nem as ativações. `generate_or_offload` não muda: o seu
# `except torch.OutOfMemoryError` captura o erro simulado como capturaria um real.
#
# **Preveja primeiro.** O prompt acima tem 12 tokens, e o cache do SmolLM2 guarda 46.080 bytes por token (tabela da
# seção 1). Com um orçamento de 600.000 bytes, em que passo o cache padrão fica sem memória (0 é o
# pré-preenchimento), e a nova tentativa com descarregamento cabe (True ou False)?

# %%
guess_step = None  # o passo em que o cache padrão esgota a memória: seu palpite
guess_retry_fits = None  # True ou False: seu palpite

# %%
# NBVAL_CHECK_OUTPUT
with kvlab.watch(smollm2) as watch, resilient.simulated_device(smollm2, budget_bytes=600_000) as device:
    out = generate_or_offload(smollm2, **inputs, do_sample=False, max_new_tokens=8)
display(score(guess_step, device.out_of_memory[0]["step"], kind="count"))
display(score(guess_retry_fits, residency.device_peak(watch.trace) <= 600_000, kind="choice"))

# %%
# NBVAL_CHECK_OUTPUT
ran_out = device.out_of_memory[0]  # o que o dispositivo simulado recusou
print(f"o cache padrão ficou sem memória no passo {ran_out['step']}, camada "
      f"{ran_out['layer_idx']}: {number(ran_out['bytes'])} bytes necessários, 600.000 disponíveis")
print("caches usados:", ", ".join(cache_kind_label(t.meta["cache_kind"]) for t in watch.traces))
print(f"pico no dispositivo da nova tentativa: {number(residency.device_peak(watch.trace))} bytes dos 600.000")
print("mesmos tokens que a execução sem restrição:", torch.equal(out, out_default))

# %% [markdown]
# O cache padrão ficou sem memória no passo 2, ao adicionar o 14º token: 13 × 46.080 = 599.040 bytes cabem, e os
# 1.536 bytes da camada 0 desse token (os bytes por camada da seção 1) não (600.576 > 600.000). A nova tentativa
# descarrega, mantém duas camadas no dispositivo (58.368 bytes, como na seção 1), cabe com folga e produz os mesmos
# tokens. Numa GPU, sem `simulated_device`, só um `torch.OutOfMemoryError` real dispara a nova tentativa (com
# `inputs` movidos para o dispositivo do modelo), e `torch.cuda.empty_cache()` devolve antes a memória da tentativa
# que falhou.
#
# ## 5. Cache offloading: o custo do tráfego (bytes contados, tempo medido, barramento estimado)
#
# O descarregamento troca memória do dispositivo por tráfego. Três números, de três tipos: os bytes que o cronograma
# transfere a cada passo (exatos, contados a partir do trace, os mesmos em qualquer máquina), o tempo de decodificação
# por token com e sem descarregamento nesta CPU (medido, com a sua dispersão e um veredito) e o tempo que esses bytes
# levariam no barramento PCIe de uma GPU (uma estimativa a partir de uma largura de banda declarada, não uma medição).
#
# Primeiro, os bytes. Nesta CPU, todo evento de transferência tem `moved=False` (a origem e o destino dele são ambos
# `cpu`), então `trace.work_by_step()`, que conta só as movimentações entre dispositivos, informa 0 bytes de
# descarregamento e de pré-carregamento. `offload_time.transfer_bytes_by_step` conta os bytes das movimentações do
# cronograma mesmo assim (as movimentações que mudam o lugar onde uma camada fica, como na tabela da seção 1): numa GPU,
# cada um desses bytes atravessa o PCIe.

# %%
# NBVAL_CHECK_OUTPUT
print("work_by_step(), bytes que mudaram de dispositivo:",
      sum(r["offload_bytes"] + r["prefetch_bytes"] for r in offloaded.work_by_step()))
print('cache_implementation="offloaded", SmolLM2, bytes que o cronograma transfere:')
print(f"{'passo':>4} {'descarreg.':>10} {'pré-carr.':>10} {'ao todo':>10} {'cache após o passo':>21}")
for row, cache_bytes in zip(offload_time.transfer_bytes_by_step(offloaded), offloaded.bytes_by_step()):
    print(f"{row['step']:>4} {number(row['offload_bytes']):>10} {number(row['prefetch_bytes']):>10} "
          f"{number(row['bytes']):>10} {number(cache_bytes):>21}")
traffic = {f"SmolLM2, {name}": offload_time.offload_traffic(trace) for name, trace in runs.items()}
traffic["Gemma 3 (600), descarregado"] = offload_time.offload_traffic(gemma_runs["offloaded"])
traffic["Gemma 3 (600), only_non_sliding=True"] = offload_time.offload_traffic(gemma_runs["DynamicCache(..., True)"])
print(f"\n{'':>48} {'por passo dec.':>15} {'por token novo':>14} {'ao todo':>11}")
for name, t in traffic.items():
    print(f"{name:>48} {number(t['bytes_per_decode_step']):>15} {number(t['bytes_per_generated_token']):>14} "
          f"{number(t['total_bytes']):>11}  ({t['generated_tokens']} tokens novos)")

# %% [markdown]
# Leia a primeira tabela linha por linha. Cada passo de decodificação descarrega cada camada com o seu token novo,
# exatamente o cache inteiro depois do passo (a última coluna), e pré-carrega cada camada de volta antes da sua
# atualização, com um token a menos (a camada 0 é pré-carregada no fim do passo, já com um token a mais): um passo
# transfere pouco menos que o dobro do cache. Os bytes crescem com o contexto, então um prompt longo move
# proporcionalmente mais por passo. O cache padrão não transfere nada; `offloaded_static` transfere a sua alocação
# inteira nos dois sentidos a cada passo; `offload_only_non_sliding=True` move só as 3 camadas completas do Gemma 3. A
# coluna "por token novo" divide tudo, pré-preenchimento incluído, pelos tokens gerados (um por passo, com lote de
# tamanho 1).
#
# O que uma medição de tempo disso na CPU diria? Veja o que um descarregamento faz com um tensor que já está na CPU:

# %%
# NBVAL_CHECK_OUTPUT
keys = torch.zeros(1, 3, 13, 64)  # as chaves de uma camada do SmolLM2: (batch, kv_heads, tokens, head_dim)
print("keys.to('cpu') is keys:", keys.to("cpu") is keys)

# %% [markdown]
# Volta exatamente o mesmo tensor: nesta máquina, um descarregamento ou um pré-carregamento não copia nada. Então, medir
# na CPU o tempo do cache descarregado mede a contabilidade do cronograma (duas chamadas a mais por camada, a cada
# passo, e o registro delas pelo kvlab), não um barramento; isso não diz quanto o descarregamento custa numa GPU. Mesmo
# assim, responde a uma pergunta mais restrita: executar o cronograma custa alguma coisa por si só? Os dois caches rodam
# dentro de `kvlab.watch` (o descarregado não roda em nenhum outro lugar nesta CPU), então a sobrecarga do registro está
# dos dois lados. Cada repetição é um `generate` de um número fixo de tokens novos, com o tempo medido por token
# decodificado por um streamer `DecodeClock` (deixando de fora o pré-preenchimento), e os dois caches se intercalam
# (`step_times.decode_step_times`, o loop com que o notebook 04 mede os seus caches quantizados).
# Cada tempo é impresso como a mediana das repetições com o seu intervalo interquartil (IQR).

# %%
# Não verificado: os tempos dependem da máquina.
NEW_TOKENS, REPEATS, WARMUP = (4, 1, 0) if QUICK else (24, 5, 1)


labels = {kind: cache_kind_label(kind) for kind in ("dynamic", "offloaded")}  # os nomes das execuções nas palavras do leitor
with kvlab.watch(smollm2):  # greedy, exatamente NEW_TOKENS tokens depois do mesmo prompt, de cada jeito
    decoded = step_times.decode_step_times(
        smollm2, inputs["input_ids"],
        {labels["dynamic"]: {}, labels["offloaded"]: {"cache_implementation": "offloaded"}},
        new_tokens=NEW_TOKENS, repeats=REPEATS, warmup=WARMUP)
decode_times = {kind: decoded[label].decode for kind, label in labels.items()}  # segundos por token decodificado
for measured in decode_times.values():
    print(f"{measured.label:>12}: {measured.describe()} por token decodificado")
print(compare(decode_times["dynamic"], decode_times["offloaded"], warn=False).verdict())

# %% [markdown]
# Leia o veredito como ele foi impresso: um intervalo que contém 1 significa nenhuma diferença detectável, e "ruído
# demais para concluir" (repetições de menos) não diz nada, nem num sentido nem no outro; um que exclui 1 é uma
# diferença na contabilidade do cronograma nesta CPU (as chamadas dele e o registro delas). Em nenhum dos casos é o
# preço do tráfego, que precisa de um barramento.
#
# Para uma GPU, os bytes só podem virar tempo com uma largura de banda, e aqui essa largura de banda é **suposta, não
# medida**: 25 GB/s em PCIe 4.0 x16. Esse link transporta no máximo 31,5 GB/s por sentido (16 GT/s em cada uma das 16
# faixas, codificação 128b/130b), e as cópias atingem menos: memória do host fixada (pinned) "pode atingir cerca de
# 12 GB/s" numa placa PCIe x16 Gen3, uns três quartos do máximo dessa geração, que é metade do da Gen4 (fonte: NVIDIA,
# CUDA C++ Best Practices Guide, "Pinned Memory"); a mesma fração do máximo da Gen4 dá cerca de 24 GB/s,
# arredondados aqui para 25. Um link PCIe 3.0, ou com 8 faixas, reduz o máximo à metade, e aí a estimativa é otimista.
# Dois números por cache, a partir dos bytes exatos por passo de decodificação acima: se nenhuma transferência se
# sobrepusesse ao cálculo, cada byte se somaria ao passo; o transformers emite cada pré-carregamento num stream
# secundário (`prefetch_stream`, em `Cache.prefetch`) para que ele rode enquanto a camada anterior calcula, mas cada
# descarregamento no stream padrão logo depois da atualização da camada (`Cache.offload`, chamado no fim de
# `Cache.update`; ambos em `transformers/cache_utils.py`); então, mesmo que todos os pré-carregamentos ficassem
# escondidos, os descarregamentos sozinhos ainda somariam o tempo deles.

# %%
# NBVAL_CHECK_OUTPUT
BANDWIDTH = offload_time.PCIE4_X16_EFFECTIVE_BYTES_PER_S  # uma suposição, não uma medida
print("estimativa, não medida: bytes por passo de decodificação "
      f"/ {number(BANDWIDTH / 1e9)} GB/s supostos (PCIe 4.0 x16)")
print(f"{'':>48} {'nada sobreposto':>18} {'pré-carr. ocultos':>18}")
for name, t in traffic.items():
    serial = offload_time.pcie_estimate(t["bytes_per_decode_step"], BANDWIDTH)
    offloads = offload_time.pcie_estimate(t["offload_bytes_per_decode_step"], BANDWIDTH)
    print(f"{name:>48} {number(serial.seconds * 1e6, 1):>15} µs {number(offloads.seconds * 1e6, 1):>15} µs")
per_token = offloaded.bytes_by_step()[1] - offloaded.bytes_by_step()[0]  # o cache inteiro do SmolLM2, por token
for tokens in (8_192, 32_768):
    serial = offload_time.pcie_estimate(2 * per_token * tokens, BANDWIDTH)  # pouco menos que o dobro do cache por passo
    print(f"SmolLM2, cache descarregado, {number(tokens)} tokens no cache: cerca de 2 × "
          f"{number(per_token)} × {number(tokens)} = {number(2 * per_token * tokens)} bytes por "
          f"passo de decodificação, {number(serial.seconds * 1e3, 1)} ms se nada se sobrepuser")

# %% [markdown]
# Com o prompt de 12 tokens da seção 1, o tráfego é pequeno, e a estimativa também; ela cresce linearmente com o
# contexto, até os milissegundos por passo das últimas linhas. Quanto disso o stream de pré-carregamento esconde, só uma
# execução numa GPU pode medir; o que este notebook dá com exatidão são os bytes.
#
# ## Principais conclusões
#
# - `cache_implementation="offloaded"` / `"offloaded_static"` e `DynamicCache`/`StaticCache(..., offloading=True)`,
#   quando todas as camadas são descarregadas (o SmolLM2 só tem camadas completas), mantêm duas camadas no dispositivo
#   no pico (a que está calculando e a pré-carregada) e movem cada camada duas vezes por passo; os tokens nunca mudam. O
#   transformers puro precisa de streams CUDA para eles; `kvlab.watch` executa o cronograma numa CPU.
# - `offloaded_static` move camadas pré-alocadas inteiras, posições vazias incluídas.
# - `offload_only_non_sliding` tem `True` como padrão no `StaticCache` (portanto em `offloaded_static`) e `False` no
#   `DynamicCache` (portanto em `offloaded`). `True` move só as camadas completas, com muito menos cópias, mas mantém
#   todas as camadas deslizantes mais duas completas no dispositivo: no Gemma 3, além da janela, 17 de 18 camadas.
# - Capturar `torch.OutOfMemoryError` e tentar de novo com `cache_implementation="offloaded"` transforma uma falta de
#   memória numa geração bem-sucedida que move cada camada para fora e de volta a cada passo de decodificação: cerca do
#   dobro do seu cache em bytes, por passo (seção 5).
# - Os bytes são exatos em qualquer máquina; o tempo deles, não. Nesta CPU, as movimentações não copiam nada, então a
#   medição de tempo (com o seu veredito) mostra só o que custa a contabilidade do cronograma. Numa GPU, a 25 GB/s
#   supostos, os bytes acrescentariam a cada passo de decodificação algo entre o tempo dos descarregamentos (todos os
#   pré-carregamentos escondidos) e o tempo de todos os bytes (nada escondido): uma estimativa, não uma medição.
#
# **A seguir:** [04 · Caches quantizados](04_quantized_caches.ipynb): encolher cada token em vez de movê-lo.
