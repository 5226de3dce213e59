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
# # 02 · StaticCache: alocar uma vez, mascarar o resto, compilar
#
# **Objetivo de aprendizagem.** Rodar um `StaticCache` das duas formas que o guia de cache mostra
# (`cache_implementation="static"` e um cache que você cria e passa), ver o que ele aloca e quando, medir as posições
# que ele aloca, mas mascara, quantificar o custo de dimensionar um único cache para a requisição mais longa e saber
# quando o transformers compila o passo de decodificação por você (num acelerador) e quando não compila (nesta CPU).
#
# **Nas palavras do kvlab.** Um `StaticCache` aloca cada camada com `max_cache_len` tokens antes de chegar o primeiro
# token e grava cada token novo na próxima posição livre. Os tensores nunca mudam de formato, então um grafo compilado
# pode ser reutilizado a cada passo; o preço é que as posições vazias existem desde o início. A atenção precisa
# ignorá-las, por isso elas são *mascaradas*: memória alocada que ainda não guarda nada. `kvlab.watch` conta, a cada
# passo, as posições alocadas, ocupadas e mascaradas.

# %%
import kvlab

kvlab.set_language("pt-BR")

# %%
# %matplotlib inline
import copy
import datetime
import inspect
import os
import platform
import warnings

import ipywidgets as widgets
import torch
import transformers
from transformers import CompileConfig, DynamicCache, StaticCache
from transformers.generation.utils import GenerationMixin

import kvlab
from kvlab.i18n import marks, number, percent
from kvlab.live import live
from kvlab.measure import compiled, decode_step, formula, text, timing
from kvlab.plots import decode_step as decode_step_plots
from kvlab.plots import growth, slots
from kvlab.plots.verdicts import add_verdicts
from kvlab.predictions import score

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")  # o transformers 5.24 escreve `cache=`
torch.manual_seed(0)
transformers.logging.disable_progress_bar()
model, tokenizer = kvlab.load("smollm2")  # SmolLM2-135M-Instruct, 30 camadas, float32, CPU

# %% [markdown]
# ## 1. Cache de tamanho fixo
#
# A primeira forma do guia: dar o nome do cache em `generate`. O transformers cria um `StaticCache` para essa chamada,
# dimensionado com `max_length - 1` posições (o prompt mais `max_new_tokens`, menos o último token, que nunca volta a
# passar pelo modelo), ou maior, quando uma chamada anterior no mesmo modelo precisou de mais (o fim desta seção
# mostra isso), e faz nele a decodificação greedy.

# %%
# NBVAL_CHECK_OUTPUT
inputs = tokenizer("A static cache reserves all of its memory before", return_tensors="pt")
out = model.generate(**inputs, do_sample=False, max_new_tokens=12, cache_implementation="static")
print(tokenizer.batch_decode(out, skip_special_tokens=True)[0])

# %% [markdown]
# A segunda forma: criar o cache você mesmo, com o tamanho que escolher, e passá-lo como `past_key_values`. As camadas
# são alocadas com `max_cache_len` posições; o cache informa quantos tokens já gravou.

# %%
# NBVAL_CHECK_OUTPUT
past_key_values = StaticCache(config=model.config, max_cache_len=128)
out_own = model.generate(**inputs, do_sample=False, max_new_tokens=12, past_key_values=past_key_values)
print("mesmos tokens que cache_implementation='static':", torch.equal(out, out_own))
print("tokens do prompt:", inputs.input_ids.shape[-1],
      "| tokens escritos no cache:", int(past_key_values.get_seq_length()))
print("chaves da camada 0, (batch, kv_heads, slots, head_dim):", tuple(past_key_values.layers[0].keys.shape))

# %% [markdown]
# 20 tokens gravados (o prompt de 9 tokens e 12 tokens gerados, menos o último, que `generate` devolve sem passá-lo pelo
# modelo) em 128 posições por camada.
#
# **Preveja primeiro.** Que fração das posições deste cache está mascarada (alocada, ainda vazia) quando `generate`
# retorna? E no cache que `cache_implementation="static"` criou?

# %%
guess_own = None  # % das posições do cache de 128 posições mascaradas no final: seu palpite
guess_auto = None  # % das posições mascaradas no cache que cache_implementation="static" criou: seu palpite

# %% [markdown]
# As mesmas três chamadas, sem mudança, dentro de `kvlab.watch`: os dois caches estáticos e, para comparação, o
# `DynamicCache` padrão. O watch registra um trace por cache, na ordem em que o modelo os usou. A primeira linha faz
# `generate` esquecer o tamanho estático que criou antes (o fim desta seção mostra por que isso importa), de modo que a
# célula dá os mesmos números seja o que for que tenha rodado antes dela.

# %%
vars(model).pop("_previous_max_cache_length", None)  # o maior tamanho estático que o generate criou neste modelo até agora
with kvlab.watch(model) as watch:
    out_auto = model.generate(**inputs, do_sample=False, max_new_tokens=12, cache_implementation="static")
    past_key_values = StaticCache(config=model.config, max_cache_len=128)
    out_own = model.generate(**inputs, do_sample=False, max_new_tokens=12, past_key_values=past_key_values)
    out_dynamic = model.generate(**inputs, do_sample=False, max_new_tokens=12)
auto, own, dynamic = watch.traces

# %%
# NBVAL_CHECK_OUTPUT
def print_trace(trace, label):
    by_step, s = trace.bytes_by_step(), trace.summary()
    print(f"{label:>17}: {number(by_step[0]):>9} bytes depois do pré-preenchimento, {number(by_step[-1]):>9} no "
          f"final; posições alocadas {number(s['slots_allocated']):>5} ({s['slots_allocated'] // 30} por camada), "
          f"ocupadas {number(s['slots_live'])}, mascaradas {number(s['slots_masked'])} ({marks(str(s['waste_pct']))}%)")


print_trace(auto, label="estático (generate)")
print_trace(own, label="StaticCache(128)")
print_trace(dynamic, label="dinâmico")
print("mesmos tokens que sem o watch:", all(torch.equal(out, o) for o in (out_auto, out_own, out_dynamic)))
print("estático (generate), posições mascaradas por passo:", [r["slots_masked"] for r in auto.slots_by_step()])
print(f"um token: {number(formula.bytes_per_token_per_layer(model.config, torch.float32))} bytes por "
      f"camada, {number(formula.kv_bytes_per_token(model.config, torch.float32))} bytes nas 30 camadas")

# %%
# NBVAL_CHECK_OUTPUT
display(score(guess_own, own.summary()["waste_pct"], unit="%", kind="share", label="StaticCache(128):"))
display(score(guess_auto, auto.summary()["waste_pct"], unit="%", kind="share", label="estático (generate):"))

# %% [markdown]
# `cache_implementation="static"` dimensionou seu cache com 20 posições por camada, exatamente o que esta chamada grava,
# então nada fica mascarado no final (as posições mascaradas diminuem passo a passo até zero). O cache de 128 posições
# guarda 30 camadas × 128 posições × 1.536 bytes = 5.898.240 bytes desde o pré-preenchimento, com 84,38% das posições
# mascaradas no final; o DynamicCache guarda só o que viu (9 tokens × 46.080 bytes depois do pré-preenchimento,
# 20 × 46.080 no final). Os tokens são os mesmos com e sem o watch, e nos três caches: as posições mascaradas nunca
# mudam um token. Mas elas não saem de graça em computação: a atenção eager e a SDPA calculam a pontuação da consulta
# contra todas as posições e só depois mascaram as vazias. A seção 3 mede isso.

# %%
slots.plot_slots(own, title="StaticCache(max_cache_len=128): posições alocadas, ocupadas e mascaradas por passo")

# %%
growth.plot_growth({"StaticCache(128)": own, "estático (generate)": auto, "DynamicCache": dynamic},
                   by_layer_kind=False,
                   title="Bytes em função dos tokens: fixos na alocação vs crescendo com a sequência")

# %% [markdown]
# "Dimensionado para a chamada" tem uma exceção que o guia não menciona. `generate` guarda, no modelo, o maior
# `max_cache_len` que já criou para `cache_implementation="static"` (`model._previous_max_cache_length`, definido em
# `_prepare_static_cache` do transformers) e nunca cria um menor, para que um grafo compilado para uma chamada sirva
# para a seguinte. Peça 30 tokens novos e depois 12 de novo:

# %%
# NBVAL_CHECK_OUTPUT
with kvlab.watch(model) as watch:
    model.generate(**inputs, do_sample=False, max_new_tokens=30, cache_implementation="static")
    model.generate(**inputs, do_sample=False, max_new_tokens=12, cache_implementation="static")
print_trace(watch.traces[0], label="30 tokens novos")
print_trace(watch.traces[1], label="depois 12 novos")
print("tamanho que generate guarda no modelo:", model._previous_max_cache_length)
del model._previous_max_cache_length  # esquece o tamanho: a próxima chamada estática volta a ser dimensionada só para si

# %% [markdown]
# A chamada de 12 tokens, que acima criou 20 posições por camada, agora recebe as 38 posições da chamada de 30 tokens
# (9 + 30 − 1), e 18 delas ficam mascaradas. Execute a célula observada acima depois desta, sem a primeira linha, e o
# "0% mascarado" deixa de valer. Passar o seu próprio `StaticCache`, como na segunda forma, dá o tamanho que você
# escolheu, seja o que for que tenha rodado antes.

# %% [markdown]
# ## 2. Cache de tamanho fixo: um só tamanho para todas as requisições
#
# O guia alerta para este caso: um StaticCache é dimensionado uma vez, para a sequência mais longa que ele precisa
# guardar, e cada sequência mais curta que vier depois paga por esse tamanho. Um servidor que precisa aceitar um prompt de
# 200 tokens com 8 tokens novos precisa de `max_cache_len` ≥ 208; digamos 256.
#
# **Preveja primeiro.** Com esse tamanho, que fração das posições alocadas está mascarada no final de uma requisição
# com um prompt de 20 tokens (8 tokens novos)? E com um prompt de 60 tokens?

# %%
guess_20 = None  # % do cache de 256 posições mascarado depois de um prompt de 20 tokens + 8 novos: seu palpite
guess_60 = None  # o mesmo depois de um prompt de 60 tokens: seu palpite

# %%
server_cache_len = 256
requests = {"prompt de 200 tokens": 200, "prompt de 60 tokens": 60, "prompt de 20 tokens": 20}
with kvlab.watch(model) as watch:
    for n_tokens in requests.values():
        request = {"input_ids": text.prompt_ids(tokenizer, n_tokens)}
        request["attention_mask"] = torch.ones_like(request["input_ids"])
        model.generate(**request, do_sample=False, max_new_tokens=8,
                       past_key_values=StaticCache(config=model.config, max_cache_len=server_cache_len))
runs = dict(zip(requests, watch.traces))

# %%
# NBVAL_CHECK_OUTPUT
waste = {row["run"]: row["waste_pct"] for row in slots.run_slots(runs)}
display(score(guess_20, waste["prompt de 20 tokens"], unit="%", kind="share", label="prompt de 20 tokens:"))
display(score(guess_60, waste["prompt de 60 tokens"], unit="%", kind="share", label="prompt de 60 tokens:"))

# %%
# NBVAL_CHECK_OUTPUT
for row in slots.run_slots(runs):
    dynamic_bytes = formula.kv_bytes(model.config, row["slots_live"] // 30)  # posições ocupadas de 30 camadas → tokens
    print(f"{row['run']:>17}: {number(row['final_bytes']):>10} bytes alocados, "
          f"{number(row['slots_masked']):>5} de {number(row['slots_allocated'])} posições mascaradas "
          f"({percent(row['waste_pct'], 1):>7}); um DynamicCache guardaria {number(dynamic_bytes):>9} bytes")

# %%
slots.plot_runs(runs, title="Um só tamanho de StaticCache (256) para toda requisição: posições ocupadas e mascaradas")

# %% [markdown]
# As requisições curtas pagam pela longa: 89,5% do cache do prompt de 20 tokens está mascarado. Há duas saídas: um
# DynamicCache (sem desperdício, mas com formatos que mudam, portanto sem grafo compilado reutilizável) ou alguns
# StaticCaches de tamanhos diferentes (faixas de comprimento), com cada requisição indo para o menor que comporte.
#
# **Experimente.** Mova `max_cache_len`: o prompt de 9 tokens acima gera 6 tokens num `StaticCache` desse tamanho dentro
# de `kvlab.watch`, e o gráfico mostra as posições ocupadas e mascaradas a cada passo.

# %%
def measure_waste(max_cache_len):
    with kvlab.watch(model) as watch:
        model.generate(**inputs, do_sample=False, max_new_tokens=6,
                       past_key_values=StaticCache(config=model.config, max_cache_len=max_cache_len))
    s = watch.trace.summary()
    return slots.plot_slots(watch.trace, title=f"StaticCache(max_cache_len={max_cache_len}): "
                                               f"{number(s['slots_masked'])} de {number(s['slots_allocated'])} "
                                               f"posições mascaradas ({percent(s['waste_pct'], 1)})")


live(measure_waste, max_cache_len=widgets.IntSlider(value=64, min=16, max=512, step=16, continuous_update=False,
                                                    description="max_cache_len"))

# %% [markdown]
# ## 3. Cache de tamanho fixo: quanto as posições mascaradas custam em tempo
#
# O alerta do guia sobre um StaticCache é a memória; as posições mascaradas também custam computação. A atenção aqui
# (SDPA na CPU) calcula `Q Kᵀ` sobre todas as `max_cache_len` posições de cada camada e depois mascara as vazias; então o
# trabalho de atenção de um passo de decodificação cresce com `max_cache_len`, embora o cache guarde os mesmos 6 tokens.
#
# **Preveja primeiro.** Um passo de decodificação depois de um prompt de 6 tokens leva certo tempo com um DynamicCache
# (7 posições por camada). Quantas vezes mais ele leva com `StaticCache(max_cache_len=4096)`, que calcula 4.096 posições
# por camada? Edite o palpite e depois rode a medição.

# %%
guess = None  # tempo de um passo com StaticCache(4096) / tempo com DynamicCache: seu palpite

# %% [markdown]
# Os caches são criados do jeito do guia e passados ao modelo; `decode_step.time_decode_step` pré-preenche cada um
# com os mesmos 6 tokens e depois mede o mesmo passo de um token contra cada um, 7 vezes, intercalando-os, e volta o
# cache com `crop(-1)` depois de cada repetição. Cada tempo é impresso como a mediana das 7 com o seu intervalo
# interquartil (IQR: a metade central das repetições). Dentro de `kvlab.watch`, o trace conta as posições que a
# atenção lê em cada passo (exato, verificado) ao lado do tempo (não verificado: depende da máquina).

# %%
short_prompt = text.prompt_ids(tokenizer, 6)  # (1, 6)
decode_caches = {"DynamicCache": DynamicCache(config=model.config)}
for max_cache_len in (64, 1024, 4096):
    decode_caches[f"StaticCache({max_cache_len})"] = StaticCache(config=model.config, max_cache_len=max_cache_len)
with kvlab.watch(model):
    decode_steps = decode_step.time_decode_step(model, short_prompt, decode_caches, repeats=7)

# %%
# NBVAL_CHECK_OUTPUT
for label, step in decode_steps.items():
    print(f"{label:>17}: um passo de decodificação avalia {number(step.slots_attended):>7} "
          f"posições de chave nas 30 camadas, {number(step.attention_flops):>11} FLOPs de atenção")

# %%
# Não verificado: os tempos dependem da máquina. Seu palpite contra a razão medida, recolhida até você dar o palpite.
reference = decode_steps["DynamicCache"].timing
ratio_4096 = timing.compare(reference, decode_steps["StaticCache(4096)"].timing, warn=False).ratio
display(score(guess, ratio_4096, unit="x", kind="amount"))

# %%
# Não verificado: os tempos dependem da máquina. Medianas de 7 repetições intercaladas, IQR e o intervalo de 95% da razão.
for label, step in decode_steps.items():
    print(f"{label:>17}: {step.timing.describe()}")
step_verdicts = [timing.compare(reference, step.timing).verdict() for step in list(decode_steps.values())[1:]]
print("\n".join(step_verdicts))

# %%
# Não verificado: os tempos dependem da máquina. A caixa sob os painéis traz os vereditos impressos acima.
add_verdicts(decode_step_plots.plot_decode_steps(decode_steps, title="SmolLM2, um passo de decodificação "
                                                                     "depois de um prompt de 6 tokens"),
             step_verdicts)

# %% [markdown]
# As contagens são exatas: 7 posições por camada para o DynamicCache (os 6 tokens guardados e o do próprio passo) e
# `max_cache_len` por camada para cada StaticCache, posições mascaradas incluídas: o trabalho de atenção cresce 585
# vezes do DynamicCache até 4.096 posições (122.880 / 210). O trabalho diz que o tempo também deve crescer com
# `max_cache_len`, mas bem menos: o resto do passo (os produtos de matrizes das 30 camadas sobre um token) não depende
# do cache. Os vereditos acima (também no quadro sob a figura) dizem quanto ele cresceu nesta execução, cada razão com
# o seu intervalo (um intervalo que contém 1 significa nenhuma diferença detectável). As contagens valem em qualquer
# máquina: todas as posições de `max_cache_len` são calculadas a cada passo, então dimensionar `max_cache_len` perto do
# que as requisições precisam economiza esse trabalho, além da memória.
#
# ## 4. Cache de tamanho fixo: compilando o passo de decodificação
#
# O guia diz que `cache_implementation="static"` também ativa a compilação automática do passo de decodificação. No
# transformers 5.25, essa decisão fica em `GenerationMixin._valid_auto_compile_criteria`
# (`transformers/generation/utils.py`). O transformers só compila quando o cache é compilável e não é um
# `DynamicCache` comum, `disable_compile` não está definido, nenhuma parte do modelo está descarregada para a CPU ou o
# disco, o quantizador de um modelo quantizado permite e o teste de hardware abaixo passa:

# %%
# NBVAL_CHECK_OUTPUT
source = inspect.getsource(GenerationMixin._valid_auto_compile_criteria)
start = source.rindex("\n", 0, source.index("valid_hardware =")) + 1
print(inspect.cleandoc(source[start:source.index(")\n", start) + 1]))

static_cache = StaticCache(config=model.config, max_cache_len=64)
print("\ndispositivo do modelo:", model.device.type)
print("compilação automática aqui:", model._valid_auto_compile_criteria({"cache": static_cache}, model.generation_config))
opted_in = copy.deepcopy(model.generation_config)
opted_in.compile_config = CompileConfig()
opted_in.compile_config._compile_all_devices = True  # flag privada; o que kvlab.measure.compiled define
print("com CompileConfig._compile_all_devices = True:",
      model._valid_auto_compile_criteria({"cache": static_cache}, opted_in))

# %% [markdown]
# Então as chamadas de `generate` acima rodaram em modo eager: numa CPU, o transformers só compila quando isso é pedido
# pelo atributo privado `CompileConfig._compile_all_devices` (o próprio comentário do transformers o chama de flag para
# testes, por exemplo numa CPU, "often not optimal"). A opção explícita do kvlab abaixo
# (`kvlab.measure.compiled.static_generate`) define exatamente essa flag no `compile_config` que ela passa a `generate`.
#
# O formato fixo é o que torna um StaticCache amigável à compilação: o transformers compila o forward de *decodificação*
# uma vez e o repete a cada passo.
#
# **Preveja primeiro.** Depois de compilar para um prompt de 40 tokens, um prompt de 60 tokens compila um grafo novo?
# E um `max_cache_len` diferente? Defina cada palpite como `True` ou `False`; eles são avaliados quando a célula
# compila.

# %%
guess_new_prompt = None  # um prompt de 60 tokens compila um grafo novo? True ou False: seu palpite
guess_new_size = None  # max_cache_len 256 (em vez de 128) compila um grafo novo? True ou False: seu palpite

# %% [markdown]
# Compilar com o inductor demora demais para a suíte de testes (as linhas abaixo imprimem o tempo de cada execução,
# compilação incluída, e o inductor guarda em disco o que compilou: `fx_graph_cache`, ligado por padrão em
# `torch/_inductor/config.py`, então uma execução posterior na mesma máquina pode levar menos); por isso, a célula
# só compila quando `KVLAB_COMPILE=1` está definido; sem isso (como na suíte de testes), ela imprime "pulado". A
# saída registrada abaixo foi produzida com `KVLAB_COMPILE=1` quando este notebook foi executado para o repositório
# (veja a linha impressa com a máquina e a data). O que é compilado: o forward de decodificação do SmolLM2 (`generate`
# do transformers com `compile_config`), com o inductor, para um StaticCache de 128 posições; o pré-preenchimento
# continua eager. A comparação em regime estável mede `generate` eager e compilado (prompt de 40 tokens, 16 tokens
# novos, mesmo tamanho de cache) 5 vezes cada, intercalando-os, depois que o grafo já existe.

# %%
prompt = text.prompt_ids(tokenizer, 40)  # (1, 40)
if os.environ.get("KVLAB_COMPILE") == "1":
    report = compiled.compile_report(model, [prompt, text.prompt_ids(tokenizer, 60)], new_tokens=16, max_cache_len=128)
    print(f"executado em {datetime.date.today()} numa máquina {platform.machine()}, "
          f"{os.cpu_count()} CPUs, torch {torch.__version__}, {torch.get_num_threads()} threads")
    for run in report["runs"]:
        print(f"  {run['label']:>22}: {run['new_graphs']} grafo(s) novo(s) compilado(s), "
              f"{number(run['seconds'], 2, grouping=False)} s (uma execução)")
    print("mesmos tokens que o eager:", report["same_tokens"])
    steady = report["steady"]
    print("regime estável, 5 execuções intercaladas de cada: eager "
          f"{number(steady['a']['median_s'], 2, grouping=False)} s, compilado "
          f"{number(steady['b']['median_s'], 2, grouping=False)} s (medianas); {steady['verdict']}")
    new_graphs = {run["run"]: run["new_graphs"] for run in report["runs"]}
    display(score(guess_new_prompt, new_graphs["prompt of 60 tokens"] > 0, kind="choice", label="prompt de 60 tokens:"))
    display(score(guess_new_size, new_graphs["max_cache_len 256"] > 0, kind="choice", label="max_cache_len 256:"))
else:
    print("pulado: defina KVLAB_COMPILE=1 para compilar (a execução "
          "registrada imprime os tempos); os palpites são avaliados então")

# %% [markdown]
# O que observar: a primeira execução compilada paga a compilação; o mesmo prompt de novo reutiliza o grafo; um novo
# comprimento de prompt **não** compila nada (o pré-preenchimento é eager, e o grafo de decodificação vê os mesmos
# formatos); um novo `max_cache_len` muda o formato dos tensores do cache e compila de novo. O tempo da primeira
# execução compilada inclui a compilação, e o do novo tamanho também.
#
# A linha do regime estável compara `generate` eager e compilado depois que o grafo já existe (16 tokens, com o
# pré-preenchimento eager incluído), e o seu veredito, com o intervalo, é a única afirmação sobre velocidade aqui: este
# notebook não mede para onde vai o tempo de um passo de decodificação, então não faz previsão, e não mede nada numa
# GPU. Um intervalo que contém 1 significa nenhuma diferença detectável nesta CPU.
#
# ### Por que a tabela do guia diz "Não" para o cache dinâmico
#
# Os critérios impressos acima recusam um `DynamicCache` simples: com ele, `generate` nunca compila. Compile mesmo
# assim o forward de decodificação, como o transformers faria (`torch.compile(..., dynamic=False)`, o padrão do seu
# `CompileConfig`: um grafo é especializado nos formatos das suas entradas), e conte os grafos que o `torch.compile`
# traça a cada chamada de decodificação: `kvlab.measure.compiled.decode_graphs` envolve `model.forward` durante um
# `generate` e os conta (com um backend que só conta, sem inductor: quais formatos precisam de um grafo não depende do
# backend). As chaves do DynamicCache crescem uma posição a cada chamada, então cada chamada encontra um formato novo;
# as do StaticCache mantêm `max_cache_len` posições. O tracing leva segundos por grafo, por isso isto também só roda
# com `KVLAB_COMPILE=1`.

# %%
if os.environ.get("KVLAB_COMPILE") == "1":
    for name, cache in {"DynamicCache": DynamicCache(config=model.config),
                        "StaticCache(128)": StaticCache(config=model.config, max_cache_len=128)}.items():
        steps = compiled.decode_graphs(model, prompt, cache, new_tokens=6)  # 5 chamadas de decodificação depois do pré-preenchimento
        print(f"{name:>16}: posições de chave a cada chamada de decodificação "
              f"{[step['key_slots'] for step in steps]}; grafos traçados "
              f"{[step['new_graphs'] for step in steps]}, {sum(step['new_graphs'] for step in steps)} ao todo")
else:
    print("pulado: defina KVLAB_COMPILE=1 para traçar os grafos (segundos por grafo numa CPU)")

# %% [markdown]
# Com um DynamicCache, cada chamada de decodificação traça um grafo próprio, para um cache uma posição mais longo que o
# anterior: um passo compilado que nunca é reexecutado, então compilar só acrescenta o seu custo. Passados
# `torch._dynamo.config.recompile_limit` (8) grafos para uma mesma função, o dynamo deixa de compilá-la e a executa em
# modo eager (`recompile_limit = 8` em `torch/_dynamo/config.py`, sob o comentário "disable (for a function) when cache
# reaches this size"). O grafo único do StaticCache é reexecutado a cada chamada. (Sem `KVLAB_COMPILE=1`, a célula
# acima é pulada; as linhas impressas no notebook versionado vêm de uma execução com ela.)
#
# ## Principais conclusões
#
# - `cache_implementation="static"` dimensiona um StaticCache para a chamada (prompt + `max_new_tokens` − 1 posições),
#   ou reutiliza o tamanho maior de que uma chamada anterior no mesmo modelo precisou; `StaticCache(config=...,
#   max_cache_len=...)` passado como `past_key_values` tem o tamanho que você escolheu. Nos dois casos, cada camada
#   aloca `max_cache_len` posições desde o início, e as não usadas ficam mascaradas; os tokens são os mesmos que com um
#   DynamicCache, mas a atenção ainda calcula as posições mascaradas, então um `max_cache_len` maior acrescenta
#   trabalho de atenção a cada passo de decodificação.
# - Dimensionado para a requisição mais longa, ele desperdiça a maior parte da memória com as curtas; agrupe por
#   comprimento ou use um DynamicCache quando os comprimentos variam e a compilação não é necessária.
# - O transformers compila o passo de decodificação sozinho apenas num acelerador (cuda, xpu, neuron, tpu, mps); numa
#   CPU, só o atributo privado `CompileConfig._compile_all_devices` liga a compilação. Aí o formato fixo permite
#   reutilizar um único grafo de decodificação; só um novo formato de cache compila de novo. Um DynamicCache muda de
#   formato a cada passo: compilado mesmo assim, ele traça um grafo novo a cada chamada de decodificação. O veredito do
#   regime estável, impresso com o seu intervalo, diz se compilar acelera a decodificação nesta CPU.
#
# **A seguir:** [03 · Descarregamento (offloading)](03_offloading.ipynb): manter o cache na memória da CPU e trazer uma
# camada de cada vez.
