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
# # 01 · DynamicCache: crescendo camada por camada e parando numa janela
#
# **Objetivo de aprendizagem.** Ler um `DynamicCache` camada por camada; ver que as camadas de atenção completa crescem
# um token por passo, enquanto as camadas de janela deslizante e de atenção em blocos param na sua janela e passam a
# descartar tokens; distinguir os tokens que uma camada mantém *ocupados* do *armazenamento* que ela ainda guarda; saber
# quando o pré-preenchimento é o pico de memória de um modelo com janela deslizante e o que `crop` faz com uma camada em
# blocos.
#
# **Nas palavras do kvlab.** `DynamicCache` é o cache padrão do transformers: ele não aloca nada de antemão e, a cada
# passo, concatena as chaves e os valores do token novo em cada camada. O que uma camada guarda depende do tipo dela.
# Uma camada *completa* (*full*) guarda tudo. Uma camada *deslizante* (*sliding*; no Gemma 3, 5 de cada 6 camadas, janela
# de 512) só deixa um token prestar atenção às últimas 512 posições, então as chaves mais antigas não servem para nada e a
# camada as descarta. Uma camada *em blocos* (*chunked*, do Llama 4) presta atenção dentro de blocos fixos, e o
# transformers a guarda em cache do mesmo jeito. A seção "Cache padrão" do guia diz exatamente isso numa observação: essas
# camadas param de crescer no tamanho da janela ou do bloco. Aqui vemos isso acontecer com `kvlab.watch`, que registra
# cada atualização de camada num `Trace`.

# %%
import kvlab

kvlab.set_language("pt-BR")

# %%
# %matplotlib inline
import warnings

import ipywidgets as widgets
import torch
import transformers
from transformers import DynamicCache

import kvlab
from kvlab.i18n import layer_kind_label, number
from kvlab.live import live
from kvlab.measure import formula, text
from kvlab.measure.layer_lengths import layer_lengths
from kvlab.plots import growth, occupancy
from kvlab.plots.layer_lengths import plot_layer_lengths
from kvlab.predictions import score

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")  # o transformers 5.24 escreve `cache=`
torch.manual_seed(0)
transformers.logging.disable_progress_bar()
smollm2, smollm2_tokenizer = kvlab.load("smollm2")  # 30 camadas de atenção completa
gemma, gemma_tokenizer = kvlab.load("gemma3")  # 18 camadas: [deslizante × 5, completa] × 3, janela 512

# %% [markdown]
# ## 1. Cache padrão num modelo só de camadas completas
#
# **Preveja primeiro.** Depois de um prompt de 40 tokens e 8 tokens gerados, quantos tokens guarda cada uma das 30
# camadas do SmolLM2? Há duas camadas que diferem (`True` ou `False`)?

# %%
guess_tokens = None  # tokens que cada camada do SmolLM2 guarda depois de 40 + 8: seu palpite
guess_layers_differ = None  # alguma camada guarda um número de tokens diferente de outra? True ou False: seu palpite

# %% [markdown]
# A chamada do guia: crie um `DynamicCache` a partir da config do modelo e passe-o a `generate`.

# %%
# NBVAL_CHECK_OUTPUT
smollm2_prompt = text.prompt_ids(smollm2_tokenizer, 40)  # (1, 40): os primeiros 40 tokens do manual do Python
past_key_values = DynamicCache(config=smollm2.config)
smollm2.generate(input_ids=smollm2_prompt, attention_mask=torch.ones_like(smollm2_prompt), do_sample=False,
                 max_new_tokens=8, min_new_tokens=8, past_key_values=past_key_values)
lengths = [layer.get_seq_length() for layer in past_key_values.layers]
display(score(guess_tokens, lengths[0], unit=" tokens", kind="count", label="tokens:"))
display(score(guess_layers_differ, len(set(lengths)) > 1, kind="choice", label="as camadas diferem:"))

# %%
# NBVAL_CHECK_OUTPUT
print("tokens por camada:", sorted(set(lengths)), "em", len(past_key_values.layers), "camadas")

# %% [markdown]
# O mesmo código dentro de `kvlab.watch`; o trace dá o comprimento e os bytes de cada camada, passo a passo.

# %%
# NBVAL_CHECK_OUTPUT
with kvlab.watch(smollm2) as watch:
    past_key_values = DynamicCache(config=smollm2.config)
    smollm2.generate(input_ids=smollm2_prompt, attention_mask=torch.ones_like(smollm2_prompt), do_sample=False,
                     max_new_tokens=8, min_new_tokens=8, past_key_values=past_key_values)
table = watch.trace.layer_table()
print("tokens por camada:", sorted({row["logical_length"] for row in table}), "em", len(table), "camadas")
print("bytes por camada: ", ", ".join(number(b) for b in sorted({row["bytes_held"] for row in table})))
print("passos:", watch.trace.summary()["steps"], "(o pré-preenchimento, depois um por token novo, menos o último)")

# %% [markdown]
# Todas as camadas guardam os mesmos 47 tokens (40 + 8 − 1: o último token é devolvido, nunca realimentado). Um
# modelo de camadas completas cresce de forma uniforme, então a memória dele é `tokens × bytes por token`, e não há mais
# nada a saber.
#
# ## 2. Cache padrão: as camadas deslizantes param de crescer (Gemma 3 além da janela de 512 tokens)
#
# O Gemma 3 270M tem 18 camadas: `[sliding × 5, full] × 3`, janela de 512, uma cabeça KV de 256. Damos a ele um prompt
# de 520 tokens do texto de referência (mais longo que a janela) e geramos mais 24, com o mesmo código do guia.
#
# **Preveja primeiro.** No final, de quantos tokens uma camada deslizante guarda as chaves (o comprimento do seu
# tensor de chaves), e uma camada completa?

# %%
guess_sliding = None  # tokens nas chaves de uma camada deslizante depois de 520 + 24: seu palpite
guess_full = None  # tokens nas chaves de uma camada completa: seu palpite

# %%
gemma_prompt = text.prompt_ids(gemma_tokenizer, 520)  # (1, 520)
with kvlab.watch(gemma) as watch:
    past_key_values = DynamicCache(config=gemma.config)
    gemma.generate(input_ids=gemma_prompt, attention_mask=torch.ones_like(gemma_prompt), do_sample=False,
                   max_new_tokens=24, min_new_tokens=24, past_key_values=past_key_values)
trace = watch.trace

# %% [markdown]
# Primeiro, o que o próprio transformers informa (depois do bloco, `past_key_values` volta a ser um `DynamicCache` comum):
# a classe de cada camada, `get_seq_length()` (tokens vistos) e o comprimento do seu tensor de chaves (tokens guardados).

# %%
# NBVAL_CHECK_OUTPUT
sliding_keys, full_keys = past_key_values.layers[4].keys.shape[-2], past_key_values.layers[5].keys.shape[-2]
display(score(guess_sliding, sliding_keys, unit=" tokens", kind="count", label="deslizante:"))
display(score(guess_full, full_keys, unit=" tokens", kind="count", label="completa:"))

# %%
# NBVAL_CHECK_OUTPUT
classes = [type(layer).__name__ for layer in past_key_values.layers]
print({name: classes.count(name) for name in dict.fromkeys(classes)}, "janela", gemma.config.sliding_window)
for i in (4, 5, 6):
    layer = past_key_values.layers[i]
    print(f"camada {i}: {classes[i]:>25}  get_seq_length() {layer.get_seq_length()}  chaves {tuple(layer.keys.shape)}")

# %% [markdown]
# E o trace da mesma execução, com as contagens do kvlab por camada:

# %%
# NBVAL_CHECK_OUTPUT
kinds = [row["layer_kind"] for row in trace.layer_table()]
print({layer_kind_label(kind): kinds.count(kind) for kind in dict.fromkeys(kinds)})
for row in trace.layer_table()[4:7]:
    print(f"camada {row['layer_idx']:2d} {layer_kind_label(row['layer_kind']):>7}: vistos {row['logical_length']}, "
          f"ocupados {row['slots_live']}, descartados {row['tokens_evicted']}, {number(row['bytes_held'])} bytes")

# %% [markdown]
# A camada deslizante viu todos os 543 tokens, mas guarda 511; a camada completa guarda os 543. O 511 está no
# código-fonte do transformers: `DynamicSlidingWindowLayer.update` (`transformers/cache_utils.py`) concatena as chaves
# guardadas com as do token novo, entrega à atenção esse tensor inteiro (511 + 1 = a janela de 512 tokens) e guarda só
# os últimos `sliding_window - 1` tokens, como uma fatia dele. É por isso que os 1.048.576 bytes da camada valem 512
# tokens (2.048 bytes por token por camada, impressos abaixo): os 511 guardados são uma view do tensor de 512 tokens, e
# o kvlab conta a alocação, não a view.
#
# ### Tokens ocupados e armazenamento depois do pré-preenchimento
#
# A mesma distinção pesa mais logo depois do pré-preenchimento. Dois números por camada, ambos impressos abaixo: os
# tokens **ocupados** (*live*: o que a atenção ainda consegue ler do cache; é o que o mapa de calor mais abaixo mostra) e o
# **armazenamento** (*storage*: os bytes que os tensores da camada mantêm alocados, divididos por 2.048 bytes por token).

# %%
# NBVAL_CHECK_OUTPUT
per_token = formula.bytes_per_token_per_layer(gemma.config, torch.float32)  # 2 × 1 cabeça × 256 × 4 bytes
print(f"um token numa camada: {number(per_token)} bytes")
for step in (0, 1, trace.summary()["steps"] - 1):
    sliding, full = layer_lengths(trace, per_token, step=step)[4:6]
    print(f"passo {step:2d}: camada deslizante 4: vistos {sliding.seen}, ocupados "
          f"{sliding.live}, armazenamento {sliding.slots_stored} tokens | camada completa 5: "
          f"vistos {full.seen}, ocupados {full.live}, armazenamento {full.slots_stored} tokens")

# %% [markdown]
# Depois do pré-preenchimento (passo 0), uma camada deslizante mantém 511 tokens **ocupados**, mas 520 tokens de
# **armazenamento**: os 511 são uma view do tensor de chaves de 520 tokens de que a atenção precisou naquele forward,
# então o tensor inteiro continua alocado. No passo 1, a camada concatena seus 511 com o token novo num tensor novo de 512
# tokens, e o de 520 é liberado; daí em diante ela guarda 512 tokens de armazenamento, 511 deles ocupados.

# %%
occupancy.plot_occupancy(trace, title="Gemma 3, DynamicCache: posições ocupadas e "
                                      "descartes por camada (prompt de 520 tokens)")

# %% [markdown]
# As linhas são camadas, as colunas são passos; a cor indica as posições **ocupadas**, e a primeira e a última coluna
# mostram a contagem escrita. Em uma linha a cada seis (as camadas completas), a contagem sobe de 520 para 543; as
# linhas deslizantes ficam em 511 ocupadas desde o pré-preenchimento (seu armazenamento é 520 no passo 0 e depois 512),
# enquanto a contagem de descartes sobe um por passo.
#
# **Preveja primeiro.** Qual passo guarda mais bytes no cache inteiro: o pré-preenchimento (passo 0) ou o último passo
# (passo 23)? Conte o armazenamento, não os tokens ocupados: 15 camadas deslizantes e 3 completas, com o armazenamento
# impresso acima. Defina `guess_peak` como `True` para o pré-preenchimento e `False` para o último passo.

# %%
guess_peak = None  # True se o pré-preenchimento (passo 0) guarda mais bytes, False se é o último passo: seu palpite

# %%
# NBVAL_CHECK_OUTPUT
summary = trace.summary()
by_step = trace.bytes_by_step()
peak_step = by_step.index(summary["peak_bytes"])
display(score(guess_peak, peak_step == 0, kind="choice", label="o pré-preenchimento guarda mais:"))

# %%
# NBVAL_CHECK_OUTPUT
print(f"pré-preenchimento: {number(by_step[0])} bytes;  depois do "
      f"passo 1: {number(by_step[1])};  final: {number(by_step[-1])}")
print(f"pico: {number(summary['peak_bytes'])} bytes no passo {peak_step};  "
      f"tokens descartados: {number(summary['tokens_evicted'])}")
print(f"fórmula, com as janelas aplicadas, com {trace.final_layers()[0]['logical_length']} tokens: "
      f"{number(formula.kv_bytes(gemma.config, trace.final_layers()[0]['logical_length']))} bytes")
added = by_step[2] - by_step[1]  # o que um passo de decodificação acrescenta: um token em cada uma das 3 camadas completas
passes = 1 + (by_step[0] - by_step[1]) // added + 1  # o primeiro passo cujos bytes passariam os do pré-preenchimento
seen = gemma_prompt.shape[-1] + passes
print(f"cada passo de decodificação acrescenta {number(added)} bytes; o primeiro passo "
      f"a guardar mais que o pré-preenchimento: passo {passes}, com {seen} tokens vistos")
types = gemma.config.layer_types
per_full_layer = types.count("sliding_attention") // types.count("full_attention")  # camadas deslizantes por camada completa: 5
longest = 32_000  # um prompt perto do contexto do Gemma 3
print(f"depois de um prompt de {number(longest)} tokens, o pré-preenchimento continua sendo o "
      f"pico por {number(per_full_layer * (longest - gemma.config.sliding_window))} passos de "
      f"decodificação; o contexto comporta {number(gemma.config.max_position_embeddings)} tokens")

# %%
growth.plot_growth(trace, expected=formula.expected_curves(gemma.config, 560), zoom=True,
                   title="DynamicCache do Gemma 3: bytes em função dos "
                         "tokens (pontilhada: fórmula a partir de 0 tokens)")

# %% [markdown]
# As curvas pontilhadas mostram o que a fórmula prevê desde o primeiro token: a parte deslizante sobe até a janela e
# depois fica plana, enquanto a parte completa (só 3 camadas) mantém a inclinação; as linhas medidas (a partir de 520
# tokens) ficam em cima delas desde o primeiro passo de decodificação. A única surpresa é o **pré-preenchimento**,
# pequeno demais para os eixos principais e desenhado no quadro em destaque, que amplia o total medido: o
# armazenamento das camadas deslizantes guarda os 520 tokens do prompt até que o primeiro passo de decodificação o
# reduza a 512, então o total cai depois do passo 0 e o pico está no passo 0, embora cheguem mais 23 tokens depois. Isso
# só vale para uma geração curta: cada passo de decodificação acrescenta um token a cada uma das 3 camadas completas (os
# 6.144 bytes impressos acima), e o primeiro passo a guardar mais que o pré-preenchimento seria o passo 41, com 561
# tokens vistos (impressos na mesma linha); então uma chamada de `generate` com 42 tokens novos ou mais depois deste
# prompt tem o pico no último passo. Em geral, o pré-preenchimento guarda (prompt − 512) tokens a mais em cada uma das
# 15 camadas deslizantes, e as 3 camadas completas recuperam essa diferença a 3 tokens por passo: o pré-preenchimento é
# o pico durante os primeiros 5 × (prompt − 512) passos de decodificação (40 aqui, e no passo 40 só empata), e a
# geração define o pico depois disso. Quanto mais longo o prompt, por mais tempo o pré-preenchimento continua sendo o
# pico: depois de um prompt de 32.000 tokens, ele continua sendo o pico por 157.440 passos de decodificação (a última
# linha impressa), muito além do contexto de 32.768 tokens do Gemma 3, então ali só o prompt define o pico.
#
# ### Experimente: um prompt que ultrapassa a janela
#
# **Preveja primeiro.** Um único pré-preenchimento de 576 tokens (um forward simples, como faz o exemplo de cache de
# prefixo do guia, com um `DynamicCache` passado): quantos tokens continuam *ocupados* numa camada deslizante?

# %%
guess = None  # tokens ocupados numa camada deslizante depois de um pré-preenchimento de 576 tokens: seu palpite

# %% [markdown]
# Mova `tokens do prompt`: a célula roda um forward com essa quantidade de tokens dentro de `kvlab.watch` e desenha, por
# camada, os tokens vistos (contorno), o armazenamento (claro) e os ocupados (sólido), com a janela tracejada. Abaixo de 512
# todas as barras coincidem; acima disso, as barras de ocupados das camadas deslizantes param em 511, enquanto as de vistos
# e de armazenamento acompanham o prompt.

# %%
measured_lengths = {}


def gemma_prefill(prompt_tokens):
    ids = text.prompt_ids(gemma_tokenizer, prompt_tokens)  # (1, prompt_tokens)
    with torch.no_grad(), kvlab.watch(gemma) as watch:
        past_key_values = DynamicCache(config=gemma.config)
        gemma(input_ids=ids, past_key_values=past_key_values)
    bytes_per_token = formula.bytes_per_token_per_layer(gemma.config, torch.float32)  # um token, uma camada
    measured_lengths[prompt_tokens] = layer_lengths(watch.trace, bytes_per_token)
    return plot_layer_lengths(measured_lengths[prompt_tokens], window=gemma.config.sliding_window,
                              title="Gemma 3 depois de um pré-preenchimento de "
                                    f"{prompt_tokens} tokens: tokens por camada")


live(gemma_prefill, prompt_tokens=widgets.IntSlider(value=576, min=256, max=768, step=64, continuous_update=False,
                                                    description="tokens do prompt"))

# %%
# NBVAL_CHECK_OUTPUT
sliding = measured_lengths[576][0]
display(score(guess, sliding.live, unit=" tokens", kind="count"))

# %%
# NBVAL_CHECK_OUTPUT
print(f"camada deslizante 0 depois de 576 tokens: vistos {sliding.seen}, "
      f"ocupados {sliding.live}, armazenamento {sliding.slots_stored}")

# %% [markdown]
# ## 3. Cache padrão: camadas de atenção em blocos, no estilo do Llama 4
#
# A observação do guia cita um segundo tipo de camada limitada: a atenção em blocos (Llama 4). Uma camada em blocos divide
# a sequência em blocos fixos e só deixa um token prestar atenção dentro do próprio bloco. Nenhum modelo incluído tem uma,
# então construímos um Llama 4 minúsculo com pesos aleatórios (`kvlab.tiny_model("tiny-llama4")`: 4 camadas, as 3
# primeiras em blocos de 8 tokens, a última completa). O texto dele é ruído; a estrutura do cache é código real do
# transformers.
#
# **Preveja primeiro.** Um prompt de 13 tokens e 10 tokens novos: de quantos tokens uma camada em blocos guarda as
# chaves?

# %%
guess = None  # tokens nas chaves de uma camada de atenção em blocos depois de 13 + 10: seu palpite

# %%
# NBVAL_CHECK_OUTPUT
tiny = kvlab.tiny_model("tiny-llama4")
tiny_prompt = torch.randint(3, 128, (1, 13), generator=torch.Generator().manual_seed(0))  # (1, 13) ids aleatórios
print(tiny.config.layer_types, "attention_chunk_size", tiny.config.attention_chunk_size)
past_key_values = DynamicCache(config=tiny.config)
tiny.generate(input_ids=tiny_prompt, attention_mask=torch.ones_like(tiny_prompt), do_sample=False,
              max_new_tokens=10, min_new_tokens=10, past_key_values=past_key_values)
display(score(guess, past_key_values.layers[0].keys.shape[-2], unit=" tokens", kind="count"))

# %%
# NBVAL_CHECK_OUTPUT
for i, layer in enumerate(past_key_values.layers):
    print(f"camada {i}: {type(layer).__name__:>25}  sliding_window {getattr(layer, 'sliding_window', '-')!s:>2}  "
          f"get_seq_length() {layer.get_seq_length()}  chaves {tuple(layer.keys.shape)}")

# %% [markdown]
# O transformers constrói uma camada em blocos como uma `DynamicSlidingWindowLayer` cuja janela é `attention_chunk_size`
# (`transformers/cache_utils.py` associa `"chunked_attention"` a `DynamicSlidingWindowLayer`, com o comentário de que,
# do ponto de vista do cache, camadas deslizantes e em blocos se comportam da mesma forma e só a máscara muda). Assim,
# as camadas em blocos viram todos os 22 tokens e guardam os últimos 7, como uma camada deslizante de janela 8,
# enquanto a camada completa guarda os 22. A mesma execução dentro de `kvlab.watch`:

# %%
# NBVAL_CHECK_OUTPUT
with kvlab.watch(tiny) as watch:
    past_key_values = DynamicCache(config=tiny.config)
    tiny.generate(input_ids=tiny_prompt, attention_mask=torch.ones_like(tiny_prompt), do_sample=False,
                  max_new_tokens=10, min_new_tokens=10, past_key_values=past_key_values)
tiny_per_token = formula.bytes_per_token_per_layer(tiny.config, torch.float32)
tiny_lengths = layer_lengths(watch.trace, tiny_per_token)
for length in tiny_lengths:
    print(f"camada {length.layer_idx} {layer_kind_label(length.layer_kind):>7}: vistos "
          f"{length.seen}, ocupados {length.live}, armazenamento {length.slots_stored}")
print(f"tokens descartados: {watch.trace.summary()['tokens_evicted']} (3 camadas em blocos × (22 − 7))")

# %%
plot_layer_lengths(tiny_lengths, window=tiny.config.attention_chunk_size, window_label="attention_chunk_size",
                   title="Llama 4 minúsculo: as camadas em blocos param no tamanho do bloco − 1; a completa cresce")

# %% [markdown]
# ### O que `crop` faz com uma camada em blocos
#
# `crop(-n)` reverte os últimos `n` tokens (o [07](07_crop_and_rollback.ipynb) trata disso). Para o cache, uma camada em
# blocos é uma camada deslizante, então ela segue a mesma regra: assim que ela tiver visto tokens suficientes para encher
# um bloco, as chaves que um recorte precisaria trazer de volta já se foram, e o transformers se recusa. Eis o erro no cache
# acima (de novo um `DynamicCache` comum depois de sair do watch):

# %% tags=["raises-exception"]
past_key_values.crop(-3)

# %% [markdown]
# Há dois casos em que o recorte funciona. Antes de as camadas verem 8 tokens, uma camada em blocos ainda guarda tudo e
# é recortada como uma completa. E, com `activate_past_recording()` chamado antes de gerar, as camadas em blocos guardam
# o passado até um recorte, que reverte os tokens e depois as reduz de novo a 7.

# %%
# NBVAL_CHECK_OUTPUT
short = tiny_prompt[:, :4]  # (1, 4): 4 + 3 novos − 1 = 6 tokens vistos, abaixo do bloco de 8
past_key_values = DynamicCache(config=tiny.config)
tiny.generate(input_ids=short, attention_mask=torch.ones_like(short), do_sample=False, max_new_tokens=3,
              min_new_tokens=3, past_key_values=past_key_values)
past_key_values.crop(-3)
print("execução curta, crop(-3):", [layer.get_seq_length() for layer in past_key_values.layers], "tokens vistos por camada")

past_key_values = DynamicCache(config=tiny.config)
past_key_values.activate_past_recording()
tiny.generate(input_ids=tiny_prompt, attention_mask=torch.ones_like(tiny_prompt), do_sample=False,
              max_new_tokens=10, min_new_tokens=10, past_key_values=past_key_values)
print("com registro do passado, antes do recorte: chaves", [layer.keys.shape[-2] for layer in past_key_values.layers])
past_key_values.crop(-3)
print("com registro do passado, depois do crop(-3): vistos", [layer.get_seq_length() for layer in past_key_values.layers],
      "chaves", [layer.keys.shape[-2] for layer in past_key_values.layers])

# %% [markdown]
# Durante o registro do passado, as camadas em blocos guardaram os 22 tokens (nenhum limite até um recorte); `crop(-3)` levou a
# sequência de volta a 19 e reduziu as camadas em blocos de novo a 7. O registro do passado troca o limite pela
# possibilidade de reverter, então uma camada em blocos que registra o passado cresce como uma completa entre um recorte e outro.
#
# ## Principais conclusões
#
# - `DynamicCache(config=model.config)` passado a `generate` é o cache padrão tornado visível: cada camada completa
#   cresce um token por passo, e os bytes dela batem exatamente com a fórmula.
# - As camadas deslizantes mantêm `window − 1` tokens ocupados e descartam o resto; no Gemma 3, acima de 512 tokens, 15 das
#   18 camadas param de crescer, então a memória cresce a 3/18 do ritmo da atenção completa.
# - Ocupado não é armazenamento: logo depois de um pré-preenchimento de N > 512 tokens, uma camada deslizante tem 511
#   tokens ocupados, mas ainda guarda N tokens de armazenamento até que o primeiro passo de decodificação o libere; então
#   o pré-preenchimento é o pico de memória durante os primeiros 5 × (N − 512) passos de decodificação (aqui foi, com
#   520 + 24: passo 0), e uma geração mais longa tem o pico no último passo.
# - O transformers guarda as camadas em blocos (Llama 4) no cache exatamente como as deslizantes, com o tamanho do bloco
#   como janela: elas se limitam a `chunk − 1`, e um `crop` depois de um bloco completo exige `activate_past_recording()`.
#
# **A seguir:** [02 · StaticCache](02_static_cache.ipynb): alocar tudo de antemão, pagar pelas posições vazias e deixar
# o `torch.compile` ver formatos fixos.
