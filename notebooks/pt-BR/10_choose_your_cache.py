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
# # 10 · Escolha seu cache
#
# **Objetivo de aprendizagem.** Ao final deste notebook você saberá escolher um cache para um modelo e um comprimento
# de contexto com números, não com adjetivos: você terá medido de novo, nesta máquina, a tabela comparativa do guia do
# transformers, e saberá calcular o cache KV de um modelo de 2B–12B com 4k ou 32k tokens antes de baixá-lo, e dizer
# quando 32k passa do contexto para o qual o modelo foi construído.
#
# **Nas palavras do kvlab.** O guia ("Estratégias de cache") avalia três caches em quatro propriedades: camadas
# deslizantes, descarregamento (offloading), `torch.compile` e memória; o texto do guia ainda diz algo sobre
# velocidade. Cada uma delas é uma afirmação que você pode testar. O kvlab troca cada célula por uma execução e uma
# regra declarada: um modelo de janela deslizante além da sua janela, uma execução com descarregamento com as
# movimentações de camadas contadas, o pico de bytes da mesma geração como razão em relação ao do DynamicCache, e o
# tempo de decodificação das próprias chamadas `generate` do guia como uma razão com o seu intervalo. Cada célula
# também diz o que é a sua evidência, porque nem toda célula pode ser uma execução da própria classe do transformers
# nesta máquina. A compilação não é medida aqui (o notebook 02 compila de verdade); as assinaturas das entradas do
# forward ao longo dos passos de decodificação ficam ao lado dessa célula como evidência. A segunda metade dimensiona
# os caches de modelos grandes a partir dos dados de arquitetura das suas configs públicas (incluídos em
# `kvlab/data/architectures.json`), e a seção 5 confere essas regras com os caches reais da seção 2.
#
# Gemma 3 270M (janela deslizante de 512) e SmolLM2-135M-Instruct, decodificação greedy, CPU.

# %%
import kvlab

kvlab.set_language("pt-BR")

# %%
# %matplotlib inline
import os
import platform
import warnings

import ipywidgets as widgets
import torch
import transformers

import kvlab
from kvlab.i18n import cache_kind_label, layer_kind_label, number
from kvlab.live import live
from kvlab.measure import text
from kvlab.measure.devices import log_forward_inputs
from kvlab.measure.guide_table import (Setup, calculated_for, compare_with_guide, live_runs, measure, tally,
                                       tally_by_basis, time_decoding, with_speed, word)
from kvlab.measure.published import GUIDE
from kvlab.models.tiny import tiny_model
from kvlab.plots.beside_live import plot_beside_live
from kvlab.plots.cache_choice import plot_cache_choice
from kvlab.plots.kv_bytes import plot_bytes
from kvlab.predictions import score
from kvlab.size import architecture, cache_size, position_notes
from kvlab.size.beside_live import beside_live

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")  # o transformers 5.24 escreve `cache=`
transformers.logging.set_verbosity_error()
torch.manual_seed(0)
QUICK = os.environ.get("KVLAB_QUICK") == "1"  # menos repetições cronometradas na suíte de testes; as saídas verificadas valem de qualquer forma
REPEATS = 2 if QUICK else 7  # as execuções cronometradas são repetidas e intercaladas; os tempos são medianas com um intervalo
gemma, gemma_tokenizer = kvlab.load("gemma3")
model, tokenizer = kvlab.load("smollm2")
print(f"esta máquina: {platform.machine()}, {platform.python_version()}, torch "
      f"{torch.__version__}, {torch.get_num_threads()} threads, acelerador: "
      f"{torch.cuda.is_available()}; modelos carregados em {gemma.dtype} e {model.dtype}")

# %% [markdown]
# ## 1. Estratégias de cache
#
# A tabela do guia compara o `DynamicCache` padrão, o `StaticCache` e o `QuantizedCache`. No `generate`, a diferença
# entre eles é uma palavra-chave: nada para o padrão, `cache_implementation="static"` e
# `cache_implementation="quantized"` com um dict `cache_config` (aqui o backend quanto, 4 bits, uma parte residual de 8 tokens
# em precisão total). O mesmo prompt de 48 tokens, 8 tokens novos em cada um:

# %%
prompt = text.prompt_ids(tokenizer, 48)  # (1, 48): os primeiros 48 tokens da prosa de referência do Python
inputs = {"input_ids": prompt, "attention_mask": torch.ones_like(prompt)}
quanto_4bit = {"backend": "quanto", "nbits": 4, "residual_length": 8, "q_group_size": 32}
out_dynamic = model.generate(**inputs, do_sample=False, max_new_tokens=8)  # o padrão: um DynamicCache
out_static = model.generate(**inputs, do_sample=False, max_new_tokens=8, cache_implementation="static")
out_quantized = model.generate(**inputs, do_sample=False, max_new_tokens=8, cache_implementation="quantized",
                               cache_config=quanto_4bit)
outputs = {"dynamic": out_dynamic, "static": out_static, "quantized": out_quantized}

# %% [markdown]
# As mesmas três chamadas dentro de `kvlab.watch`, que registra cada cache que `generate` criou, e a calculadora de
# tamanho do kvlab consultada para os mesmos tokens:

# %%
with kvlab.watch(model) as watch:
    watched_outputs = {
        "dynamic": model.generate(**inputs, do_sample=False, max_new_tokens=8),
        "static": model.generate(**inputs, do_sample=False, max_new_tokens=8, cache_implementation="static"),
        "quantized": model.generate(**inputs, do_sample=False, max_new_tokens=8, cache_implementation="quantized",
                                    cache_config=quanto_4bit),
    }
watched = {kind: (trace, watched_outputs[kind]) for kind, trace in zip(watched_outputs, watch.traces)}

# %%
# NBVAL_CHECK_OUTPUT
smollm2 = architecture("smollm2")
for kind, (trace, out) in watched.items():
    size = calculated_for(trace, smollm2, prompt_tokens=48, cache_config=quanto_4bit if kind == "quantized" else None)
    print(f"{trace.meta['cache_class']:<14} guarda {number(trace.summary()['final_bytes']):>9} "
          f"B para {size.tokens} tokens (calculado {number(size.bytes):>9} B); tokens iguais "
          f"aos sem watch: {torch.equal(out, outputs[kind])}; iguais aos do cache dinâmico: "
          f"{torch.equal(outputs[kind], outputs['dynamic'])}")
static_trace = watched["static"][0]
print(f"posições do StaticCache por camada: {static_trace.final_layers()[0]['slots_allocated']} "
      "(max_length - 1 do generate = 48 + 8 - 1)")

# %% [markdown]
# O próprio `generate` dimensionou o cache estático, em `max_length - 1` = 48 + 8 - 1 = 55 posições: o prompt mais os
# 7 tokens novos que ele volta a passar ao modelo (o 8º nunca volta), então aqui ele guarda exatamente o mesmo que o
# cache dinâmico. O cache quantizado de 4 bits é cerca de 3,4 vezes menor, e seus tokens greedy já divergem dos
# outros dentro desses 8 tokens. A próxima seção mede a tabela do guia coluna por coluna e acrescenta uma coluna de
# velocidade, cronometrada nessas mesmas três chamadas.

# %% [markdown]
# ## 2. A tabela do guia, medida aqui
#
# Cada célula é medida e depois julgada por uma regra escrita antes da execução (`kvlab.measure.guide_table`):
#
# - **camadas deslizantes** (*sliding layers*): "Sim" quando o cache é construído sem erro no Gemma 3 além da sua
#   janela de 512 tokens e suas camadas deslizantes ficam dentro da janela.
# - **descarregamento** (*offloading*): "Sim" quando existe uma variante com descarregamento e a sua execução move
#   camadas, contadas como o notebook 03 as conta (`residency.effective_moves`: só as transferências que mudam onde
#   uma camada fica); os dispositivos entre os quais elas ocorreram são impressos ao lado.
# - **torch.compile**: *não medido aqui*, portanto não julgado: compilar leva dezenas de segundos
#   numa CPU, e o notebook 02 compila de verdade (com `KVLAB_COMPILE=1`). Ao lado, o número de assinaturas distintas
#   das entradas do forward ao longo dos passos de decodificação: o que um compilador baseado em tracing encontra, não
#   o que ele compilou.
# - **memória** (*memory*): o pico de bytes do cache dividido pelo do DynamicCache. As palavras do guia são relativas ao
#   seu DynamicCache "Médio", então a regra é: abaixo de 0,9 é "Baixo", acima de 1,1 é "Alto", entre os dois,
#   "Médio". A célula do próprio DynamicCache é a referência da razão, por isso não é julgada.
#
# Cada célula julgada também diz o que é a sua evidência, e a contagem abaixo soma a concordância só entre iguais:
#
# - *medido na própria classe do transformers*: uma execução do cache que o `generate` constrói, ou a recusa da
#   própria classe;
# - *substituto de CPU do kvlab*: o transformers recusa os caches descarregados nesta CPU (notebook 03, seção 1),
#   então, dentro do `kvlab.watch`, o gêmeo do kvlab executa o cronograma do transformers com toda cópia ficando na
#   CPU;
# - *lido de uma assinatura*: nada rodou; a classe não tem esse argumento.
#
# Aqui o cache estático é criado com folga, como se faz quando o comprimento final não é conhecido:
# `max_cache_len` = 48 + 8 + 64 (`Setup(static_room=64)`), impresso abaixo. O cache quantizado usa o backend quanto
# com 4 bits e uma parte residual de 8 tokens em precisão total.
#
# **Preveja primeiro.** A execução guarda 48 + 7 = 55 tokens. O cache estático vai guardar quantas vezes o pico de
# bytes do DynamicCache?

# %%
guess = None  # bytes de pico do estático ÷ bytes de pico do dinâmico: seu palpite

# %%
setup = Setup(new_tokens=8, static_room=64)
rows = measure(gemma, model, tokenizer, prompt=text.prompt_ids(tokenizer, 48),
               sliding_prompt_ids=text.prompt_ids(gemma_tokenizer, 520), setup=setup)

# %%
# NBVAL_CHECK_OUTPUT
static_ratio = next(row["memory ratio"] for row in rows if row["cache_kind"] == "static")
display(score(guess, round(static_ratio, 2), unit="x", kind="amount"))

# %%
# NBVAL_CHECK_OUTPUT
guide = {g["cache"]: g for g in GUIDE.values()}  # a tabela do guia, nas palavras dele
for row in rows:  # as células mantêm as palavras em inglês do guia; `word` mostra cada uma no idioma do leitor
    print(f"{word(row['cache']):<16} deslizantes: {word(row['sliding layers']):<3} descarregamento: "
          f"{word(row['offloading']):<3} torch.compile: {word(row['torch.compile'])}")
    print(f"{'':>18}memória: {number(row['memory ratio'], 2)}x o pico do DynamicCache "
          f"-> {word(row['memory'])} (o guia: {word(guide[row['cache']]['memory'])})")
    print(f"{'':>18}evidência das camadas deslizantes "
          f"({word(row['basis']['sliding layers'])}): {row['sliding evidence']}")
    print(f"{'':>18}evidência do descarregamento ({word(row['basis']['offloading'])}): {row['offloading evidence']}")
    print(f"{'':>18}evidência de compilação: {row['compile evidence']}")
    print(f"{'':>18}bytes de pico do cache (SmolLM2, prompt de 48 tokens "
          f"+ {setup.new_tokens} novos): {number(row['peak cache bytes'])}")
static_slots = setup.options("static", 48)["max_cache_len"]
print(f"max_cache_len do cache estático: {static_slots} posições "
      f"para os 55 tokens guardados: {static_slots - 55} a mais")

# %%
# NBVAL_CHECK_OUTPUT
verdicts = compare_with_guide(rows)
count = tally(verdicts)
print(f"{count['judged']} de {count['cells']} células julgadas, {count['not judged']} não; por tipo de evidência:")
for basis, c in tally_by_basis(verdicts).items():
    print(f"  {word(basis):<38} concordam: {c['agree']} de {c['judged']}, "
          f"diferem: {c['differ']} ({', '.join(word(p) for p in c['properties'])})")
for v in verdicts:
    if v["agrees"] is not True:
        print(f"  {word(v['cache']):<16} {word(v['property']):<15} guia: "
              f"{word(v['guide']):<7} medido: {word(v['measured']):<18} ({v['why']})")

# %%
plot_bytes({word(row["cache"]): {"bytes no pico": row["peak cache bytes"]} for row in rows},
           title=f"Bytes de pico do cache, SmolLM2, prompt de 48 tokens + {setup.new_tokens} tokens novos")

# %% [markdown]
# Três coisas que os adjetivos escondem:
#
# - "Suporta camadas deslizantes" quer dizer que as camadas deslizantes ficam na janela (511 ou 512 posições)
#   enquanto as camadas completas guardam todos os tokens; o cache quantizado recusa o modelo logo de saída, e o
#   próprio `QuantizedCache` do transformers também, quando construído para a config do Gemma 3.
# - "Suporta offloading" é, nesta CPU, o substituto do kvlab: mostra que o cronograma do transformers roda e quantas
#   movimentações de camadas ele faz, contadas como no notebook 03 (271 para `offloaded`: 18 descarregamentos e 1
#   pré-carregamento no pré-preenchimento, depois cada uma das 18 camadas do Gemma 3 duas vezes em cada um dos 7
#   passos de decodificação; 46 para `offloaded_static`, cujo padrão `offload_only_non_sliding=True` move só as 3
#   camadas completas: 4 + 7 × 6). As movimentações ficam na CPU, então nada é economizado; o que o próprio transformers faz numa GPU não é medido aqui. O "Não" do cache quantizado é lido da
#   sua assinatura: nada rodou.
# - Então a concordância não é uma contagem só: as células medidas nas próprias classes do transformers (camadas
#   deslizantes e memória) são as únicas que uma execução do transformers sustenta; as células de descarregamento
#   concordam como substituto e como assinatura.
# - A memória "Alto" do cache estático é uma escolha: é o `max_cache_len` que você reservar. Reserve exatamente os
#   tokens de que precisa e a razão é 1 (o cache estático da seção 1 guardou exatamente os bytes do cache dinâmico),
#   o que a regra chamaria de "Médio"; o preço é pago quando você chuta alto.
#
# A evidência de compilação é a contagem de assinaturas do forward do notebook 09: um cache estático dá uma
# assinatura para todos os 7 passos de decodificação, e o cache dinâmico, uma por passo (7 de 7). O cache quantizado
# também dá 7 de 7, como o cache dinâmico: as chaves que um forward recebe são a sua parte residual em precisão total, que
# cresce um token por passo e ainda não tinha preenchido suas 8 posições. Em execuções mais longas, a parte residual é
# empacotada a cada 8 tokens e recomeça, então seus formatos se repetem: o controle abaixo mede isso (8 assinaturas
# distintas em 23 chamadas de decodificação com o seu padrão de 24 tokens novos). Se um compilador compila uma vez por
# assinatura depende das suas opções (formatos dinâmicos, limites de recompilação), e é por isso que esta célula
# continua "não medido aqui".

# %% [markdown]
# ### A coluna de velocidade: tempo de decodificação em relação ao DynamicCache
#
# A tabela do guia não tem coluna de velocidade, mas o texto dele usa palavras de velocidade: a quantização do cache
# "pode prejudicar a latência se o comprimento do contexto for curto" (48 tokens é curto), e a afirmação de velocidade
# do cache estático é sobre decodificação compilada ("compatíveis com otimizações JIT, como torch.compile, para
# acelerar a geração"), nenhuma sobre decodificação em modo eager. A célula de velocidade só é julgada onde o guia faz
# uma afirmação e o veredito medido vai além do ruído (o intervalo fica de um lado só de 1 e não é largo demais); caso
# contrário, ela diz "não distinguível aqui".
#
# Primeiro, o que os contadores de trabalho das execuções observadas da seção 1 preveem, somados sobre os forwards de
# decodificação de cada execução e as 30 camadas: as posições de chave contra as quais a pontuação de cada consulta
# foi calculada (posições mascaradas incluídas), os FLOPs de atenção e os elementos que o cache quantizado
# desempacotou. Ao lado deles, a aritmética dos pesos desses mesmos forwards (cerca de 2 FLOPs por parâmetro por
# token), a mesma para todos os caches.

# %%
# NBVAL_CHECK_OUTPUT
weight_flops = 2 * sum(p.numel() for p in model.parameters())
print(f"pesos: cerca de {number(weight_flops)} FLOPs por forward de decodificação, para todo cache")
for kind, (trace, _) in watched.items():
    decode = trace.work_by_step()[1:]  # a linha 0 é o pré-preenchimento
    slots, flops = sum(r["slots_attended"] for r in decode), sum(r["attention_flops"] for r in decode)
    print(f"{cache_kind_label(kind):<10} {len(decode)} forwards de decodificação: "
          f"{number(slots):>6} posições de chave que a atenção lê, {number(flops):>11} FLOPs "
          f"de atenção, {number(sum(r['dequantized_elements'] for r in decode)):>9} "
          f"elementos desquantizados, {number(sum(r['quantized_elements'] for r in decode))} "
          f"quantizados; pesos {number(len(decode) * weight_flops)} FLOPs")

# %% [markdown]
# Os contadores preveem: o cache estático avalia algumas posições de chave a mais que o cache dinâmico (as suas
# posições mascaradas), um extra pequeno perto da aritmética dos pesos; o cache quantizado faz a atenção do cache
# dinâmico e, além disso, desempacota suas chaves e valores de 4 bits a cada passo. A célula abaixo cronometra as
# três chamadas `generate` do guia (transformers puro, sem o registro do kvlab), intercaladas, do primeiro token novo
# ao último, de modo que o pré-preenchimento fica de fora. Cada tempo é impresso como a mediana das repetições com o
# seu intervalo interquartil (IQR). O veredito impresso diz se o trabalho extra previsto aparece no tempo:
# um intervalo que contém 1 significa nenhuma diferença detectável.

# %%
# Não verificado: os tempos dependem da máquina.
guide_calls = {"dynamic": {},  # o padrão: um DynamicCache
               "static": {"cache_implementation": "static"},
               "quantized": {"cache_implementation": "quantized", "cache_config": quanto_4bit}}
timings = time_decoding(model, prompt, guide_calls, new_tokens=setup.new_tokens, repeats=REPEATS)
rows_with_speed = with_speed(rows, timings)
for row in rows_with_speed:
    low, high = row["speed interval"]
    print(f"{word(row['cache']):<16} decodificação {timings[row['cache_kind']].describe()}; "
          f"x{number(row['speed ratio'], 2)} ({number(low, 2)}-{number(high, 2)}) da "
          f"decodificação do DynamicCache -> {word(row['speed'])}")
    print(f"{'':>18}{row['speed verdict']}")
speed_verdicts = [v for v in compare_with_guide(rows_with_speed) if v["property"] == "speed"]
for v in speed_verdicts:
    cache, claim, measured = word(v["cache"]), word(v["guide"]), word(v["measured"])
    if v["agrees"]:
        print(f"  {cache:<16} velocidade: guia {claim!r}, medido {measured!r}: concorda")
    elif v["agrees"] is False:
        print(f"  {cache:<16} velocidade: guia {claim!r}, medido {measured!r}: difere")
    else:
        print(f"  {cache:<16} velocidade: guia {claim!r}, medido {measured!r}: não julgado ({v['why']})")
verdicts_with_speed = compare_with_guide(rows_with_speed)
count = tally(verdicts_with_speed)
print(f"tabela inteira com velocidade: {count['judged']} de "
      f"{count['cells']} células julgadas, {count['not judged']} não")
for basis, c in tally_by_basis(verdicts_with_speed).items():
    print(f"  {word(basis):<38} concordam: {c['agree']} de {c['judged']}, "
          f"diferem: {c['differ']} ({', '.join(word(p) for p in c['properties'])})")

# %% [markdown]
# ### Experimente: um cache, ao vivo, ao lado da calculadora
#
# Escolha um cache e um número de tokens novos: a figura executa a chamada `generate` do guia para esse cache sobre o
# prompt de 48 tokens dentro de `kvlab.watch` e de `log_forward_inputs`. À esquerda: os bytes que o cache real guarda
# no final (losango laranja), sobre as barras que `kvlab.size` calcula para cada tipo com os mesmos tokens. À
# direita: o comprimento das chaves do cache que cada forward de decodificação recebeu (0 quando a parte residual do cache quantizado
# está vazia) e o número de assinaturas de entrada distintas que um compilador baseado em tracing encontraria.
#
# As barras do estático são calculadas para um cache com exatamente os tokens guardados. `generate` nunca cria um
# cache estático menor do que o maior que já criou antes neste modelo (notebook 09, último controle); por isso, depois
# de uma execução estática mais longa, uma mais curta mostra seu losango acima da barra: o cache real manteve as
# posições extras.

# %%
KEYS = "cache.layers[0].keys"  # guide_calls: as palavras-chave do guia para cada cache, da célula de velocidade acima


def cache_choice(cache, new_tokens):
    with kvlab.watch(model) as run_watch, log_forward_inputs(model) as run_log:
        model.generate(**inputs, do_sample=False, max_new_tokens=new_tokens, **guide_calls[cache])
    trace = run_watch.trace
    held = 48 + new_tokens - 1
    calculated = {kind: cache_size(smollm2, kind, held, prefill=48, **options).bytes
                  for kind, options in {"dynamic": {}, "static": {"max_cache_len": held},
                                        "quantized": quanto_4bit}.items()}  # fmt: skip
    return plot_cache_choice(cache, trace.summary()["final_bytes"], calculated, run_log.lengths(KEYS),
                             run_log.decoding_signatures(), title="SmolLM2, prompt de 48 tokens "
                                                                  f"+ {new_tokens} tokens novos")  # fmt: skip


live(cache_choice,
     cache=widgets.Dropdown(options=[(cache_kind_label(k), k) for k in guide_calls], value="quantized", description="cache"),
     new_tokens=widgets.IntSlider(value=24, min=4, max=40, step=4, continuous_update=False, description="tokens novos"))

# %% [markdown]
# ## 3. Dimensionando o cache de modelos grandes antes de baixá-los
#
# Cada cache é dimensionado no dtype que a config publicada do modelo indica (`torch_dtype`): 16 bits para a maioria,
# mas float32 para o Gemma 2 (suas linhas cairiam pela metade em bfloat16). A tabela imprime o contexto de cada
# modelo, o seu `max_position_embeddings`: onde 32k tokens passam dele, os bytes de 32k são o que um cache desse
# comprimento guardaria, não um comprimento sobre o qual o modelo foi construído para aplicar atenção (marcado
# `fora ctx` e hachurado na figura).
#
# **Preveja primeiro.** O Llama-2-7B (float16) tem 32 cabeças KV por camada; o Llama-3-8B (bfloat16) tem 8
# (grouped-query attention); os dois têm 32 camadas com cabeças de tamanho 128. Com 4k tokens, quantos GiB cada um
# guarda? E o Gemma 3 12B (bfloat16), cujas 48 camadas são 40 deslizantes (janela de 1.024) e 8 completas, com 32k
# tokens?

# %%
guess_llama2 = None  # GiB, Llama-2-7B com 4k tokens: seu palpite
guess_llama3 = None  # GiB, Llama-3-8B com 4k tokens: seu palpite
guess_gemma3 = None  # GiB, Gemma 3 12B com 32k tokens: seu palpite

# %%
MODELS = ["llama-2-7b", "llama-3-8b", "mistral-7b", "gemma-2-2b", "gemma-2-9b", "gemma-3-4b", "gemma-3-12b",
          "qwen3-4b", "phi-3-mini"]
sizes = {}
for name in MODELS:
    arch = architecture(name)
    # um prompt de `tokens - 1`, depois um passo de decodificação: as camadas deslizantes voltam à sua janela
    sizes[name] = {f"{tokens // 1024}k tokens": cache_size(arch, "dynamic", tokens, prefill=tokens - 1, dtype=arch.dtype)
                   for tokens in (4096, 32768)}  # fmt: skip

# %%
# NBVAL_CHECK_OUTPUT
for label, guessed, name, length in [("Llama-2-7B, 4k", guess_llama2, "llama-2-7b", "4k tokens"),
                                     ("Llama-3-8B, 4k", guess_llama3, "llama-3-8b", "4k tokens"),
                                     ("Gemma 3 12B, 32k", guess_gemma3, "gemma-3-12b", "32k tokens")]:  # fmt: skip
    display(score(guessed, round(sizes[name][length].bytes / 2**30, 2), unit=" GiB", kind="amount", label=f"{label}:"))

# %%
# NBVAL_CHECK_OUTPUT
print(f"{'modelo':<12} {'dtype':<9} {'camadas (tipos)':<20} {'janela':>6} {'cab. KV x dim':>14} "
      f"{'contexto':>8} {'4k tokens':>12} {'32k tokens':>21} {'pico pré-pr. 32k':>17}")
past_context = set()  # (modelo, "32k tokens") em que 32k passa do max_position_embeddings do modelo
for name in MODELS:
    arch, four, thirty_two = architecture(name), *sizes[name].values()
    kinds = ", ".join(f"{n} {layer_kind_label(k, plural=n > 1)}" for k, n in arch.counts().items())
    past = bool(position_notes(arch, thirty_two.tokens))  # uma nota só quando os tokens passam das posições do modelo
    if past:
        past_context.add((name, "32k tokens"))
    print(f"{name:<12} {arch.dtype:<9} {kinds:<20} {number(arch.sliding_window) if arch.sliding_window else '-':>6} "
          f"{f'{arch.kv_heads} x {arch.head_dim}':>14} {number(arch.max_positions):>8} "
          f"{number(four.bytes / 2**30, 2):>8} GiB ", end="")
    if past:  # o marcador da coluna de 32k, com 9 caracteres de largura
        print(f"{'fora ctx ':>9}", end="")
    else:
        print(f"{'':>9}", end="")
    print(f"{number(thirty_two.bytes / 2**30, 2):>8} GiB {number(thirty_two.peak_bytes / 2**30, 2):>13} GiB")
print(f"fora ctx: {number(thirty_two.tokens)} tokens passam do contexto do modelo em "
      f"{len(past_context)} de {len(MODELS)} modelos: os bytes são o que um cache desse "
      "comprimento guardaria; o modelo não foi construído para prestar atenção tão longe")

# %%
peaks = {name: {"4k tokens": per["4k tokens"].bytes, "32k tokens": per["32k tokens"].bytes,
                "pico do pré-preenchimento 32k": per["32k tokens"].peak_bytes} for name, per in sizes.items()}  # fmt: skip
plot_bytes(peaks, title="DynamicCache depois de um prompt de 4k / 32k tokens, e o "
                        "pico do pré-preenchimento de 32k\n(dtype publicado, lote de 1)", bar_inches=0.3,
           marked=past_context | {(name, "pico do pré-preenchimento 32k") for name, _ in past_context},
           marked_label="além do contexto do modelo")

# %% [markdown]
# A grouped-query attention divide o cache pela razão entre as cabeças: com 8 cabeças KV em vez de 32 (mesmas
# camadas, mesmo tamanho de cabeça e dtype de 2 bytes), o Llama-3-8B guarda um quarto do cache do Llama-2-7B nos dois
# comprimentos. As camadas deslizantes param de crescer ao atingir a janela: os layouts do Gemma 3 (29 deslizantes
# para 5 completas no 4B, 40 para 8 no 12B) mantêm a maioria das camadas na sua janela de 1.024 tokens, então de 4k
# para 32k tokens seus caches crescem cerca de 4x enquanto o do Llama-3-8B cresce 8x. (As configs do Mistral-7B v0.1
# e do Phi-3-mini tornam *todas* as camadas deslizantes, então suas barras de 4k e 32k são iguais; no Phi-3-mini,
# 32k também passa do seu contexto.) Mas atenção à terceira barra, a última coluna da tabela: um único
# pré-preenchimento longo primeiro monta as chaves e os valores do prompt inteiro em todas as camadas, deslizantes ou
# não, e só o passo de decodificação seguinte traz as camadas deslizantes de volta ao tamanho da janela. É esse pico
# transitório, e não o regime estável, que precisa caber na memória: o Mistral-7B com 32k se estabiliza em 0,50 GiB,
# mas chega a 4,00 GiB durante o pré-preenchimento; o Gemma 3 12B se estabiliza em 2,31 GiB, mas chega a 12,00 GiB.
# Só nos modelos em que todas as camadas são de atenção completa (os Llamas, o Qwen3) os dois são iguais.

# %% [markdown]
# ## 4. Qualquer arquitetura: o transformers a dimensiona no dispositivo meta
#
# A regra da seção 3, 2 (chaves e valores) × cabeças KV × head_dim × camadas × bytes do dtype por token, é a regra
# dos modelos para os quais o guia foi escrito. Dois tipos de modelo de ponta a quebram, e o guia nunca diz isso:
#
# - **Atenção latente multicabeça** (*multi-head latent attention*, MLA; DeepSeek-V3): cada camada guarda no cache
#   um latente comprimido (`kv_lora_rank` 512) e uma chave rope (64) por token, compartilhados pelas 128 cabeças de
#   atenção, em vez de chaves e valores por cabeça.
# - **Híbridos** (Qwen3-Next-80B-A3B): 36 das suas 48 camadas são de atenção linear, cujo cache é um estado de
#   tamanho fixo (uma janela curta de convolução e uma matriz recorrente por cabeça), o mesmo em qualquer
#   comprimento de contexto.
#
# O kvlab não escreve uma regra por arquitetura. O `kvlab.size.meta` constrói o modelo a partir da sua config
# pública no dispositivo meta do PyTorch (tensores com formato e dtype, sem pesos e sem memória), passa tokens meta
# pelo próprio `DynamicCache` do transformers e conta o que cada camada guarda. Para os nomes conhecidos as contagens
# ficam guardadas, então `architecture(...)` e `cache_size(...)` respondem na hora.
#
# **Preveja primeiro.** O Llama-3.1-70B (bfloat16) guarda no cache 80 camadas × 2 × 8 cabeças KV × 128 × 2 bytes
# por token. Quantos bytes por token o DeepSeek-V3 guarda em bfloat16, nas suas 61 camadas?

# %%
guess_deepseek = None  # bytes por token, DeepSeek-V3 em bfloat16: seu palpite

# %%
# NBVAL_CHECK_OUTPUT
per_token = {name: cache_size(architecture(name), "dynamic", 1, dtype="bfloat16").bytes  # um prompt de 1 token
             for name in ["llama-3.1-70b", "deepseek-v3"]}  # fmt: skip
display(score(guess_deepseek, per_token["deepseek-v3"], unit=" B", kind="amount"))

# %%
# NBVAL_CHECK_OUTPUT
for name in per_token:
    arch = architecture(name)
    one_token = cache_size(arch, "dynamic", 1, dtype="bfloat16")  # o que um token custa
    at_32k = cache_size(arch, "dynamic", 32768, prefill=32767, dtype="bfloat16")
    print(f"{name:<14} {len(arch.layer_kinds)} camadas, {arch.attention_heads:>3} cabeças de atenção: "
          f"{number(one_token.bytes):>7} B por token, {number(at_32k.bytes / 2**30, 2):>5} GiB com 32k tokens")
print(f"o Llama-3.1-70B guarda {number(per_token['llama-3.1-70b'] / per_token['deepseek-v3'], 2)} "
      "vezes os bytes por token do DeepSeek-V3")

# %% [markdown]
# O híbrido, por tipo de camada, depois de um prompt de 4k e de 32k tokens (a mesma execução de prompt e um passo
# da tabela da seção 3):

# %%
# NBVAL_CHECK_OUTPUT
qwen3_next = architecture("qwen3-next-80b-a3b")
hybrid = {tokens: cache_size(qwen3_next, "dynamic", tokens, prefill=tokens - 1, dtype=qwen3_next.dtype)
          for tokens in (4096, 32768)}  # fmt: skip
print(f"qwen3-next-80b-a3b, {qwen3_next.dtype}: {'4k tokens':>12} {'32k tokens':>12} {'cresce':>7}")
for kind, layers in qwen3_next.counts().items():
    four, thirty_two = hybrid[4096].by_layer_kind[kind], hybrid[32768].by_layer_kind[kind]
    print(f"  {layers} camadas {layer_kind_label(kind, plural=True):<6}: {number(four / 2**20, 2):>8} "
          f"MiB {number(thirty_two / 2**20, 2):>8} MiB {number(thirty_two / four, 2):>6}x")
four, thirty_two = hybrid[4096].bytes, hybrid[32768].bytes
print(f"  {'cache inteiro':<16}: {number(four / 2**20, 2):>8} MiB "
      f"{number(thirty_two / 2**20, 2):>8} MiB {number(thirty_two / four, 2):>6}x")

# %% [markdown]
# O DeepSeek-V3 guarda 70.272 B por token: 61 camadas × (512 do latente + 64 da chave rope) × 2 bytes, os mesmos
# 576 números por token e camada, seja qual for a das 128 cabeças que os lê. O Llama-3.1-70B guarda 327.680 B, 4,66
# vezes mais, então com 32k tokens o cache do DeepSeek-V3 tem 2,14 GiB e o do Llama-3.1-70B, 10,00 GiB. No
# Qwen3-Next, as 36 camadas lineares guardam 74,25 MiB com 4k tokens e os mesmos 74,25 MiB com 32k: só as 12
# camadas completas crescem com o contexto (8,00x para 8 vezes os tokens), então o cache inteiro cresce 4,95x. O
# estado é 74,25 dos 170,25 MiB com 4k tokens, e 74,25 dos 842,25 MiB com 32k: quanto mais longo o contexto, mais
# as camadas completas dominam.

# %% [markdown]
# ### Experimente: o dispositivo meta ao lado de um modelo minúsculo real
#
# A execução meta guarda o que uma execução real guarda? Escolha um tipo de modelo: o kvlab constrói um modelo
# minúsculo desse tipo com pesos aleatórios (`kvlab.models.tiny`: a config padrão do transformers para esse tipo,
# reduzida à largura 64 e ao menor número de camadas que mantém uma camada de cada tipo) e gera 4 tokens greedy
# depois de um prompt de 12 tokens com o `DynamicCache` padrão, dentro do `kvlab.watch`. Ao lado, o
# `kvlab.size.meta` dimensiona a mesma config minúscula no dispositivo meta para os mesmos tokens. Por tipo de
# camada: a barra meta, a barra real (hachurada) e `exato` acima do par quando os dois batem byte a byte. Antes, a
# tabela mostra todos os tipos do menu.

# %%
MODEL_TYPES = ["qwen3_next", "deepseek_v3", "llama", "gemma3_text", "gpt_oss", "llama4_text", "gpt_bigcode",
               "mamba", "jamba", "zamba"]  # fmt: skip
tiny_prompt = torch.arange(3, 15).unsqueeze(0)  # (1, 12) ids de token, abaixo dos ids especiais de todo vocabulário minúsculo
NEW_TOKENS = 4


def tiny_beside_meta(model_type):
    """A tiny model of `model_type` generates greedily inside `kvlab.watch`; its cache per layer kind is set beside
    the meta device's count for the same config and tokens (rows: kind, layers, meta_bytes, live_bytes, exact)."""
    tiny = tiny_model(model_type, seed=0)
    with kvlab.watch(tiny) as tiny_watch:
        out = tiny.generate(tiny_prompt, attention_mask=torch.ones_like(tiny_prompt), do_sample=False,
                            max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS)  # (1, 12 + 4); um DynamicCache
    return beside_live(tiny.config, tiny_watch.trace, prompt_tokens=tiny_prompt.shape[-1],
                       sequence_tokens=out.shape[-1], dtype=tiny.dtype)  # fmt: skip


# %%
# NBVAL_CHECK_OUTPUT
held = tiny_prompt.shape[-1] + NEW_TOKENS - 1  # o generate realimenta cada token novo, menos o último
print(f"{held} tokens em cada cache, float32; bytes por tipo de camada")
print(f"{'modelo':<12} {'tipo':<8} {'camadas':>7} {'meta':>9} {'real':>9}  exato")
every_type = {model_type: tiny_beside_meta(model_type) for model_type in MODEL_TYPES}
for model_type, kind_rows in every_type.items():
    for row in kind_rows:
        print(f"{model_type:<12} {layer_kind_label(row.kind):<8} {row.layers:>7} {number(row.meta_bytes):>9} "
              f"{number(row.live_bytes):>9}  {row.exact}")
exact_types = sum(all(row.exact for row in kind_rows) for kind_rows in every_type.values())
print(f"exato em todos os tipos de camada: {exact_types} de {len(MODEL_TYPES)} tipos de modelo")

# %%
def meta_beside_live(model_type):
    return plot_beside_live(tiny_beside_meta(model_type),
                            title=f"{model_type}, minúsculo: prompt de 12 tokens + {NEW_TOKENS} tokens novos, float32")


live(meta_beside_live,
     model_type=widgets.Dropdown(options=MODEL_TYPES, value="qwen3_next", description="tipo de modelo"))

# %% [markdown]
# Os 10 tipos de modelo do menu mostram `True` em todos os tipos de camada: o que o cache do transformers guardou
# no dispositivo meta é, byte a byte, o que o cache do modelo minúsculo real guardou. O Qwen3-Next minúsculo mostra
# a divisão do híbrido em miniatura: depois de 15 tokens, as suas 3 camadas lineares guardam 18.432 B de estado, e
# a sua única camada completa, 3.840 B de chaves e valores; as 2 camadas do DeepSeek-V3 minúsculo guardam 4.800 B
# de latentes e chaves rope. O que se confere aqui é o método, em configs minúsculas em float32; os números dos
# modelos de ponta acima são o mesmo método aplicado às configs públicas em tamanho real (só tensores meta, sem
# pesos), então são calculados, não medidos.

# %% [markdown]
# ## 5. A calculadora está certa? Conferida com os caches reais acima
#
# **Preveja primeiro.** A calculadora nunca executa um modelo. Para as execuções da seção 2 (Gemma 3 além da sua
# janela, SmolLM2 com três tipos de cache), cada tamanho calculado, no final e no pico, vai ser igual aos bytes que o
# kvlab contou no cache real (True), ou só vai chegar perto (False)?

# %%
guess = None  # True: igual ao byte em toda execução; False: só próximo. Seu palpite

# %%
# NBVAL_CHECK_OUTPUT
checked = []  # (nome do modelo, o que a execução real guardou, o tamanho da calculadora para o mesmo tipo, tokens e opções)
for run_facts in live_runs(rows):  # não `live`: esse nome é o helper de widget importado acima
    arch = architecture("gemma3" if run_facts["model"] == "sliding model" else "smollm2")
    predicted = cache_size(arch, run_facts["cache_kind"], run_facts["tokens"], prefill=run_facts["prefill"],
                           dtype=str(model.dtype).removeprefix("torch."), **run_facts["options"])  # fmt: skip
    checked.append((arch.name, run_facts, predicted))
exact = [(facts["final_bytes"], facts["peak_bytes"]) == (size.bytes, size.peak_bytes) for _, facts, size in checked]
display(score(guess, all(exact), kind="choice"))

# %%
# NBVAL_CHECK_OUTPUT
for (name, run_facts, predicted), same in zip(checked, exact):
    print(f"{name:<8} {predicted.dtype:<8} {cache_kind_label(run_facts['cache_kind']):<10} "
          f"{run_facts['tokens']} tokens: medido {number(run_facts['final_bytes']):>11} B, calculado "
          f"{number(predicted.bytes):>11} B | pico medido {number(run_facts['peak_bytes']):>11} B, "
          f"calculado {number(predicted.peak_bytes):>11} B | exato: {same}")

# %% [markdown]
# O que isto confere, exatamente: cinco execuções reais em dois modelos pequenos carregados em float32 — Gemma 3 270M
# (dinâmico e estático, 527 tokens, além da sua janela de 512 tokens, com o pico transitório do pré-preenchimento das
# camadas deslizantes) e SmolLM2-135M (dinâmico, estático e quantizado com quanto em 4 bits, 55 tokens) — iguais byte
# a byte, no final e no pico, onde a tabela acima imprime `exato: True`. As linhas de modelos grandes da seção 3
# aplicam as mesmas regras por camada a outras configs, dtypes de 16 bits e comprimentos de até 32k que não foram
# executados aqui: são calculadas, não medidas, e valem na medida em que essas regras se transferem (cabeças KV,
# tamanho de cabeça, tipos de camada e janelas lidos de cada config pública). A mesma calculadora está na linha de
# comando:
# `kvlab size --model gemma-3-12b --tokens 32768 --dtype bfloat16`.

# %% [markdown]
# ## Principais conclusões
#
# - DynamicCache: o padrão; lida com camadas deslizantes; as entradas do seu forward mudam de formato a cada passo (7
#   assinaturas em 7 passos); a memória acompanha os tokens.
# - StaticCache: uma única assinatura para toda a decodificação, por isso é o cache para `torch.compile` (compilado e
#   cronometrado no notebook 02); custa exatamente o que você reserva com `max_cache_len`.
# - QuantizedCache: o menor, só para modelos de atenção completa. As entradas do seu forward mudam de formato a cada
#   passo, como as do cache dinâmico (7 assinaturas em 7 passos na tabela); em execuções mais longas, o comprimento da
#   parte residual se repete com período `residual_length`, então a contagem para em `residual_length` (8 distintas em
#   23 chamadas de decodificação no controle). Ele desempacota suas chaves e valores a cada passo; o veredito de
#   velocidade que a tabela imprimiu diz se isso custa tempo na sua máquina.
# - O descarregamento move o cache de cada camada entre dispositivos em torno de cada forward (271 movimentações de
#   camadas na execução dinâmica com descarregamento no Gemma 3, aqui; 46 no `offloaded_static`, que move só as
#   camadas completas; nesta CPU elas rodaram no substituto do kvlab); só economiza memória onde há um acelerador.
# - Antes de escolher, calcule o tamanho: 2 (chaves e valores) × cabeças KV × head_dim × camadas × bytes do dtype ×
#   tokens, menos o que as janelas deslizantes descartam, mais o pico transitório do pré-preenchimento, e confira os
#   tokens com o contexto do modelo. `kvlab.size` faz essa conta; a seção 5 mostra que ela é exata nas execuções
#   acima.
# - Antes de confiar nessa fórmula, pergunte o que o modelo guarda: a atenção latente do DeepSeek-V3 guarda
#   70.272 B por token em bfloat16, enquanto o Llama-3.1-70B guarda 327.680 B, e as camadas lineares de um
#   híbrido guardam um estado que não cresce com o contexto. `kvlab.size` conta os próprios caches do
#   transformers no dispositivo meta para qualquer tipo de modelo (seção 4), byte a byte o que modelos
#   minúsculos reais dos 10 tipos do menu guardaram.
#
# **De volta ao início:** [00 · Comece aqui](00_start_here.ipynb), ou abra o Explorador de Cache com `kvlab explore`.
